//! Every GGUF architecture lucent reads, and every RoPE scaling, held to llama.cpp bit for bit on small
//! random-weight files (`tests/data/gguf_families/*.gguf`, written with their llama.cpp
//! reference by `scripts/make_gguf_families.py` with llama-cpp-python 0.3.36 built for
//! AVX2, see docs/families.md):
//!
//! - each file opened through the public door (`lucent::open`), at 1 and at 2 threads:
//!   the logits after each of three prompts (5, 17 and 40 token ids, run as one batch
//!   into the KV cache) equal llama.cpp's to the bit, and the 32 greedy tokens after it
//!   (argmax of the last logits, appended, one decode step each: what `generate` does
//!   at temperature 0) are llama.cpp's;
//! - each architecture's distinguishing feature bites: the same file built with that
//!   config field switched off gives other greedy tokens (QKV biases, QK-norm, the
//!   attention soft-cap, the sliding window, the post-norms, Granite's multipliers,
//!   SmolLM3's layers without RoPE, each RoPE scaling: linear, YaRN, Llama 3.1's
//!   frequency factors), or,
//!   for the features that cannot move an argmax (a final soft-cap, a logit divisor:
//!   both monotonic), other logits;
//! - Phi-3's fused matrices are read in their row order (swapping the gate and up halves
//!   changes the greedy tokens);
//! - a file whose metadata asks for what lucent does not do is refused naming the key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lucent::io::gguf::GgufFile;
use lucent::model::config::PositionKind;
use lucent::model::family::{gguf_family, GgufWeights, NameTable, Param};
use lucent::model::DecoderModel;
use lucent::ops::RopeScaling;
use lucent::{ModelConfig, Numerics};
use serde::Deserialize;

#[path = "common/gguf_bench.rs"]
mod gguf_bench;
use gguf_bench::{greedy, on_threads, Case};

#[derive(Deserialize)]
struct Reference {
    files: BTreeMap<String, File>,
}

#[derive(Deserialize)]
struct File {
    file: String,
    cases: Vec<Case>,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/gguf_families")
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(data_dir().join("reference.json")).expect("reference");
    serde_json::from_str(&text).expect("reference json")
}

/// `arch`'s file, opened through `lucent::open`, equals llama.cpp at 1 and 2 threads.
fn check_bit_exact(arch: &str) {
    let reference = reference();
    let file = &reference.files[arch];
    let path = data_dir().join(&file.file);
    let model = lucent::open(path.to_str().expect("utf-8 path")).expect("open");
    // A feature's variant ("llama-linear") is a file of its architecture ("llama").
    let family = arch.split('-').next().unwrap_or(arch);
    assert_eq!(model.config().family, family);
    let tm = model.text_model().expect("a decoder");
    for threads in [1usize, 2] {
        for case in &file.cases {
            let want = &case.logits_bits[&threads.to_string()];
            let (first, ids) = on_threads(threads, || {
                greedy(&tm.model, &case.prompt_ids, case.greedy_ids.len())
            });
            let got: Vec<u32> = first.iter().map(|x| x.to_bits()).collect();
            let worst = first
                .iter()
                .zip(want)
                .map(|(a, &b)| (a - f32::from_bits(b)).abs())
                .fold(0.0f32, f32::max);
            assert!(
                &got == want,
                "{arch}, {threads} thread(s), prompt of {}: logits differ from llama.cpp's (largest |difference| {worst})",
                case.prompt_ids.len()
            );
            assert_eq!(
                ids,
                case.greedy_ids,
                "{arch}, {threads} thread(s), prompt of {}: greedy tokens",
                case.prompt_ids.len()
            );
        }
    }
}

/// `arch`'s file built with `edit` applied to its config (llama.cpp's arithmetic, as
/// `DecoderModel::from_gguf` runs it): the tensors a switched-off feature would read
/// are left unread.
fn edited(arch: &str, edit: impl Fn(&mut ModelConfig)) -> DecoderModel {
    let reference = reference();
    let f = GgufFile::open(data_dir().join(&reference.files[arch].file)).expect("open");
    let fam = gguf_family(&f).expect("family");
    let mut cfg = fam.config(&f).expect("config");
    edit(&mut cfg);
    DecoderModel::load(cfg.clone(), &fam.weights(&f, &cfg))
        .expect("build")
        .with_numerics(Numerics::LlamaCpp)
}

/// With `edit`, the longest prompt's greedy tokens are not llama.cpp's (the feature
/// `edit` switches off changes what the model says).
fn check_bites(arch: &str, feature: &str, edit: impl Fn(&mut ModelConfig)) {
    let model = edited(arch, edit);
    let reference = reference();
    let case = reference.files[arch].cases.last().expect("cases");
    let (_, ids) = on_threads(1, || {
        greedy(&model, &case.prompt_ids, case.greedy_ids.len())
    });
    assert_ne!(
        ids, case.greedy_ids,
        "{arch}: without {feature} the greedy tokens are still llama.cpp's, so the test cannot see the feature"
    );
}

/// With `edit`, the logits after the longest prompt are not llama.cpp's (for features
/// that leave the argmax alone).
fn check_logits_move(arch: &str, feature: &str, edit: impl Fn(&mut ModelConfig)) {
    let model = edited(arch, edit);
    let reference = reference();
    let case = reference.files[arch].cases.last().expect("cases");
    let (first, _) = on_threads(1, || greedy(&model, &case.prompt_ids, 0));
    let got: Vec<u32> = first.iter().map(|x| x.to_bits()).collect();
    assert_ne!(
        &got, &case.logits_bits["1"],
        "{arch}: without {feature} the logits are still llama.cpp's"
    );
}

#[test]
fn llama_equals_llama_cpp() {
    check_bit_exact("llama");
}

#[test]
fn qwen2_equals_llama_cpp() {
    check_bit_exact("qwen2");
}

#[test]
fn qwen2_qkv_biases_bite() {
    check_bites("qwen2", "Q/K/V biases", |c| c.qkv_bias = false);
}

#[test]
fn qwen3_equals_llama_cpp() {
    check_bit_exact("qwen3");
}

#[test]
fn qwen3_qk_norm_bites() {
    check_bites("qwen3", "QK-norm", |c| c.qk_norm = false);
}

#[test]
fn gemma2_equals_llama_cpp() {
    check_bit_exact("gemma2");
}

#[test]
fn gemma2_attention_softcap_bites() {
    check_bites("gemma2", "the attention soft-cap", |c| {
        c.attn_softcap = None
    });
}

#[test]
fn gemma2_sliding_window_bites() {
    check_bites("gemma2", "the sliding window", |c| {
        c.sliding_window = None;
        c.global_every = None;
    });
}

#[test]
fn gemma2_post_norms_bite() {
    check_bites("gemma2", "the post-norms (sandwich placement)", |c| {
        c.norm_placement = lucent::model::NormPlacement::Pre
    });
}

#[test]
fn gemma2_final_softcap_moves_the_logits() {
    check_logits_move("gemma2", "the final soft-cap", |c| c.final_softcap = None);
}

#[test]
fn olmo2_equals_llama_cpp() {
    check_bit_exact("olmo2");
}

#[test]
fn olmo2_whole_vector_qk_norm_bites() {
    check_bites("olmo2", "QK-norm", |c| {
        c.qk_norm = false;
        c.qk_norm_whole = false;
    });
}

#[test]
fn granite_equals_llama_cpp() {
    check_bit_exact("granite");
}

#[test]
fn granite_embedding_multiplier_bites() {
    check_bites("granite", "embedding_scale", |c| c.embedding_scale = 1.0);
}

#[test]
fn granite_residual_multiplier_bites() {
    check_bites("granite", "residual_scale", |c| c.residual_scale = None);
}

#[test]
fn granite_attention_multiplier_bites() {
    check_bites("granite", "attention.scale", |c| {
        c.attention_scale = None;
        c.attention_scale_in_softmax = false;
    });
}

#[test]
fn granite_logit_divisor_moves_the_logits() {
    check_logits_move("granite", "logit_scale", |c| c.logit_scale = None);
}

/// A file whose metadata asks for what lucent does not implement is refused, and the
/// message names the key (for a RoPE scaling type lucent does not read, the key and
/// the value; `qwen2-yarn` and `qwen3-linear` name a type without its factor).
#[test]
fn unsupported_keys_are_refused_by_name() {
    for (file, key) in [
        ("qwen2-yarn.gguf", "qwen2.rope.scaling.type"),
        ("qwen3-linear.gguf", "qwen3.rope.scaling.type"),
        ("olmo2-swa.gguf", "olmo2.attention.sliding_window"),
        ("granite-norope.gguf", "granite.rope.scaling.finetuned"),
        ("qwen2-longrope.gguf", "longrope"),
    ] {
        let path = data_dir().join(file);
        let err = match lucent::open(path.to_str().expect("utf-8 path")) {
            Ok(_) => panic!("{file}: opened, but {key} asks for what lucent does not do"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(key),
            "{file}: the error does not name {key}: {err}"
        );
        if key == "longrope" {
            assert!(err.contains("qwen2.rope.scaling.type"), "{err}");
        }
    }
}

#[test]
fn smollm3_equals_llama_cpp() {
    check_bit_exact("smollm3");
}

#[test]
fn smollm3_layers_without_rope_bite() {
    check_bites("smollm3", "its layers without RoPE", |c| {
        c.no_rope_every = None
    });
}

/// An architecture lucent does not read is refused naming `general.architecture`, and
/// the message lists every architecture of the family table (it is read from it).
#[test]
fn an_unknown_architecture_lists_the_families() {
    let path = data_dir().join("mamba-unknown.gguf");
    let err = match lucent::open(path.to_str().expect("utf-8 path")) {
        Ok(_) => panic!("mamba-unknown.gguf opened, but lucent reads no mamba"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("'mamba'") && err.contains("general.architecture"),
        "{err}"
    );
    for fam in lucent::model::family::GGUF_FAMILIES {
        assert!(err.contains(&format!("\"{}\"", fam.arch)), "{err}");
    }
}

/// The config with RoPE's scaling switched off (its factors are still read).
fn without_scaling(c: &mut ModelConfig) {
    if let PositionKind::Rope { scaling, .. } = &mut c.position {
        *scaling = RopeScaling::None;
    }
}

#[test]
fn llama_linear_rope_scaling_equals_llama_cpp() {
    check_bit_exact("llama-linear");
}

#[test]
fn llama_linear_rope_scaling_bites() {
    check_bites("llama-linear", "linear RoPE scaling", without_scaling);
}

#[test]
fn qwen3_yarn_rope_scaling_equals_llama_cpp() {
    check_bit_exact("qwen3-yarn");
}

#[test]
fn qwen3_yarn_rope_scaling_bites() {
    check_bites("qwen3-yarn", "YaRN RoPE scaling", without_scaling);
}

#[test]
fn llama_rope_freq_factors_equal_llama_cpp() {
    check_bit_exact("llama-ropefreqs");
}

#[test]
fn llama_rope_freq_factors_bite() {
    check_bites("llama-ropefreqs", "the RoPE frequency factors", |c| {
        if let PositionKind::Rope { freq_factors, .. } = &mut c.position {
            *freq_factors = false;
        }
    });
}

/// The scalings are read from the files as llama.cpp reads them: the config says so.
#[test]
fn rope_scalings_are_read_from_the_files() {
    let position = |name: &str| {
        let f = GgufFile::open(data_dir().join(format!("{name}.gguf"))).expect("open");
        gguf_family(&f)
            .expect("family")
            .config(&f)
            .expect("config")
            .position
    };
    assert!(matches!(
        position("llama-linear"),
        PositionKind::Rope {
            scaling: RopeScaling::Linear { factor: 8.0 },
            freq_factors: false,
            ..
        }
    ));
    assert!(matches!(
        position("qwen3-yarn"),
        PositionKind::Rope {
            scaling: RopeScaling::Yarn {
                factor: 4.0,
                original_context: 64,
                attn_factor: 1.0
            },
            ..
        }
    ));
    assert!(matches!(
        position("llama-ropefreqs"),
        PositionKind::Rope {
            scaling: RopeScaling::None,
            freq_factors: true,
            ..
        }
    ));
}

/// Phi-3: fused attn_qkv and ffn_up split at load into row ranges (W_q, W_k, W_v; gate,
/// up), Q scaled by 1/√d_k before the product, and its sliding-window key ignored as
/// llama.cpp ignores it: bit for bit, so a wrong split or order would show.
#[test]
fn phi3_equals_llama_cpp() {
    check_bit_exact("phi3");
}

/// The row order of the fused gate-and-up matrix matters: read the other way round
/// (up first), the greedy tokens change.
#[test]
fn phi3_gate_up_order_bites() {
    let reference = reference();
    let f = GgufFile::open(data_dir().join(&reference.files["phi3"].file)).expect("open");
    let cfg = gguf_family(&f).expect("family").config(&f).expect("config");
    let mut keys = lucent::model::family::phi3::NAMES.keys.to_vec();
    for (p, _) in keys.iter_mut() {
        *p = match *p {
            Param::FfnGateWeight => Param::FfnUpWeight,
            Param::FfnUpWeight => Param::FfnGateWeight,
            other => other,
        };
    }
    let swapped = NameTable {
        family: "phi3",
        prefixes: &[""],
        keys: Box::leak(keys.into_boxed_slice()),
    };
    let model = DecoderModel::load(cfg.clone(), &GgufWeights::new(&f, &swapped, &cfg))
        .expect("build")
        .with_numerics(Numerics::LlamaCpp);
    let case = reference.files["phi3"].cases.last().expect("cases");
    let (_, ids) = on_threads(1, || {
        greedy(&model, &case.prompt_ids, case.greedy_ids.len())
    });
    assert_ne!(
        ids, case.greedy_ids,
        "phi3: with gate and up swapped the greedy tokens are still llama.cpp's"
    );
}

/// Phi-3's LongRoPE factor tensors are refused naming the tensor.
#[test]
fn phi3_longrope_factors_are_refused_by_name() {
    use lucent::io::gguf::{GgufValue, GgufWriter};
    let mut w = GgufWriter::new();
    w.add("general.architecture", GgufValue::String("phi3".into()));
    for (key, v) in [
        ("phi3.block_count", 1),
        ("phi3.context_length", 64),
        ("phi3.embedding_length", 8),
        ("phi3.feed_forward_length", 16),
        ("phi3.attention.head_count", 2),
    ] {
        w.add(key, GgufValue::U32(v));
    }
    w.add(
        "phi3.attention.layer_norm_rms_epsilon",
        GgufValue::F32(1e-6),
    );
    w.add_f32("token_embd.weight", &[5, 8], &[0.5; 40])
        .expect("tensor");
    w.add_f32("rope_factors_long.weight", &[2], &[1.0, 2.0])
        .expect("tensor");
    let f = GgufFile::from_bytes(&w.to_bytes(), "phi3-longrope.gguf").expect("gguf");
    let err = gguf_family(&f)
        .expect("family")
        .config(&f)
        .expect_err("LongRoPE refused")
        .to_string();
    assert!(err.contains("rope_factors_long.weight"), "{err}");
}
