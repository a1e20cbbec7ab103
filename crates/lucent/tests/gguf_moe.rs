//! The Mixture-of-Experts block (`nn::moe`) in the GGUF families that carry it, held to
//! llama.cpp bit for bit on small random-weight files (`tests/data/gguf_moe/*.gguf`,
//! written with their llama.cpp reference by `scripts/make_gguf_moe.py` with
//! llama-cpp-python 0.3.36 built for AVX2): `qwen3moe` (8 experts of width 64, 2 per
//! token) and a `llama` file with experts (the Mixtral layout, 8 of width 128, 2 per
//! token), 3 layers each.
//!
//! - each file opened through `lucent::open`, at 1 and 2 threads: the logits after each
//!   of three prompts equal llama.cpp's to the bit, and its 32 greedy tokens;
//! - each part of the block bites: one expert per token instead of two, the two weights
//!   not renormalised, one expert's weights zeroed in every layer, each gives other
//!   greedy tokens than llama.cpp's;
//! - the trace: the experts recorded for every position and layer are the top-2 of the
//!   recorded router logits, and their weights the renormalised softmax of those logits;
//! - expert arithmetic lucent does not do (sigmoid gating, shared experts) is refused
//!   naming the key; `lucent inspect`'s report shows the expert counts the script wrote.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lucent::io::gguf::GgufFile;
use lucent::model::family::gguf_family;
use lucent::model::DecoderModel;
use lucent::nn::{FeedForward, Linear, Trace};
use lucent::{ModelConfig, Numerics, Tensor};
use serde::Deserialize;

#[path = "common/gguf_bench.rs"]
mod gguf_bench;
use gguf_bench::{greedy, on_threads, Case};

#[derive(Deserialize)]
struct Reference {
    meta: Meta,
    files: BTreeMap<String, File>,
}

#[derive(Deserialize)]
struct Meta {
    /// n, the experts per layer the script wrote.
    experts: u64,
    /// k, the experts used per token.
    used: u64,
}

#[derive(Deserialize)]
struct File {
    file: String,
    arch: String,
    cases: Vec<Case>,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/gguf_moe")
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(data_dir().join("reference.json")).expect("reference");
    serde_json::from_str(&text).expect("reference json")
}

/// `name`'s file, opened through `lucent::open`, equals llama.cpp at 1 and 2 threads.
fn check_bit_exact(name: &str) {
    let reference = reference();
    let file = &reference.files[name];
    let path = data_dir().join(&file.file);
    let model = lucent::open(path.to_str().expect("utf-8 path")).expect("open");
    assert_eq!(model.config().family, file.arch);
    assert!(model.config().experts.is_some(), "{name}: no experts read");
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
                "{name}, {threads} thread(s), prompt of {}: logits differ from llama.cpp's (largest |difference| {worst})",
                case.prompt_ids.len()
            );
            assert_eq!(
                ids,
                case.greedy_ids,
                "{name}, {threads} thread(s), prompt of {}: greedy tokens",
                case.prompt_ids.len()
            );
        }
    }
}

/// `name`'s file built with `edit` applied to its config, in llama.cpp's arithmetic.
fn edited(name: &str, edit: impl Fn(&mut ModelConfig)) -> DecoderModel {
    let reference = reference();
    let f = GgufFile::open(data_dir().join(&reference.files[name].file)).expect("open");
    let fam = gguf_family(&f).expect("family");
    let mut cfg = fam.config(&f).expect("config");
    edit(&mut cfg);
    DecoderModel::load(cfg.clone(), &fam.weights(&f, &cfg))
        .expect("build")
        .with_numerics(Numerics::LlamaCpp)
}

/// `model`'s greedy tokens after the longest prompt are not llama.cpp's for `name`.
fn check_bites(name: &str, feature: &str, model: &DecoderModel) {
    let reference = reference();
    let case = reference.files[name].cases.last().expect("cases");
    let (_, ids) = greedy(model, &case.prompt_ids, case.greedy_ids.len());
    assert_ne!(
        ids, case.greedy_ids,
        "{name}: without {feature} the greedy tokens are still llama.cpp's, so the test cannot tell it is computed"
    );
}

/// The unedited build of each file gives llama.cpp's greedy tokens (so what the
/// `…_bites` tests change is the feature alone), then each edit bites.
fn check_all_bite(name: &str) {
    let reference = reference();
    let case = reference.files[name].cases.last().expect("cases");
    let plain = edited(name, |_| {});
    assert_eq!(
        greedy(&plain, &case.prompt_ids, case.greedy_ids.len()).1,
        case.greedy_ids,
        "{name}: the config-built model"
    );
    let one = edited(name, |c| {
        if let Some(e) = &mut c.experts {
            e.top_k = 1;
        }
    });
    check_bites(name, "the second expert (k = 1 instead of 2)", &one);
    let raw = edited(name, |c| {
        if let Some(e) = &mut c.experts {
            e.normalize_weights = false;
        }
    });
    check_bites(name, "the renormalisation of the k weights", &raw);
    let mut zeroed = edited(name, |_| {});
    for layer in &mut zeroed.decoder.layers {
        let FeedForward::Experts(m) = &mut layer.ffn else {
            panic!("{name}: a layer without experts");
        };
        let FeedForward::Gated { down, .. } = &mut m.experts[0] else {
            panic!("{name}: expert 0 is not gated");
        };
        let shape = down.weight.shape().to_vec();
        *down = Linear::new(Tensor::zeros(&shape), None).expect("zero W_down");
    }
    check_bites(name, "expert 0 (its W_down zeroed in every layer)", &zeroed);
}

#[test]
fn qwen3moe_equals_llama_cpp() {
    check_bit_exact("qwen3moe");
}

#[test]
fn mixtral_layout_llama_equals_llama_cpp() {
    check_bit_exact("mixtral");
}

/// The router F32, as real Qwen3-MoE files keep it: its product in tinyBLAS's F32 order
/// for the prompts and `ggml_vec_dot_f32`'s for each greedy token.
#[test]
fn qwen3moe_f32_router_equals_llama_cpp() {
    check_bit_exact("qwen3moe-f32-router");
}

#[test]
fn qwen3moe_experts_bite() {
    check_all_bite("qwen3moe");
}

#[test]
fn mixtral_layout_experts_bite() {
    check_all_bite("mixtral");
}

/// The configs read: n, k and each expert's width (Qwen3-MoE's own key; Mixtral's
/// `feed_forward_length`).
#[test]
fn expert_shapes_are_read_from_the_metadata() {
    for (name, d_ff) in [("qwen3moe", 64), ("mixtral", 128)] {
        let f = GgufFile::open(data_dir().join(format!("{name}.gguf"))).expect("open");
        let cfg = gguf_family(&f).expect("family").config(&f).expect("config");
        let ex = cfg.experts.expect("experts");
        assert_eq!(
            (ex.n_experts, ex.top_k, ex.d_ff, ex.normalize_weights),
            (8, 2, d_ff, true),
            "{name}"
        );
    }
}

/// The trace of a prompt: for every layer and position, the recorded experts are the
/// two largest recorded router logits (most probable first), the recorded weights the
/// softmax of the logits renormalised over those two, and the recorded probabilities
/// sum to 1.
#[test]
fn traced_choices_are_the_top_k_of_the_traced_router_logits() {
    let reference = reference();
    for name in ["qwen3moe", "mixtral"] {
        let file = &reference.files[name];
        let model =
            lucent::open(data_dir().join(&file.file).to_str().expect("utf-8")).expect("open");
        let tm = model.text_model().expect("a decoder");
        let prompt = &file.cases.last().expect("cases").prompt_ids;
        let mut trace = Trace::new();
        tm.model
            .forward(prompt, None, false, Some(&mut trace))
            .expect("forward");
        let n_layers = tm.model.decoder.layers.len();
        for l in 0..n_layers {
            let get = |leaf: &str| {
                trace
                    .get(&format!("decoder.layer.{l}.ffn.{leaf}"))
                    .unwrap_or_else(|| panic!("{name}: no {leaf} in layer {l}"))
                    .clone()
            };
            let (logits, probs, experts, weights) = (
                get("router_logits"),
                get("router_probs"),
                get("experts"),
                get("expert_weights"),
            );
            assert_eq!(logits.shape(), [1, prompt.len(), 8], "{name}");
            assert_eq!(experts.shape(), [1, prompt.len(), 2], "{name}");
            for t in 0..prompt.len() {
                let r = &logits.data()[t * 8..(t + 1) * 8];
                let mut order: Vec<usize> = (0..8).collect();
                order.sort_by(|&a, &b| r[b].total_cmp(&r[a]));
                let chosen: Vec<usize> = experts.data()[t * 2..(t + 1) * 2]
                    .iter()
                    .map(|&e| e as usize)
                    .collect();
                assert_eq!(chosen, order[..2], "{name}, layer {l}, position {t}");
                let max = r[order[0]] as f64;
                let e: Vec<f64> = order[..2]
                    .iter()
                    .map(|&i| (r[i] as f64 - max).exp())
                    .collect();
                let s: f64 = e.iter().sum();
                for (j, &w) in weights.data()[t * 2..(t + 1) * 2].iter().enumerate() {
                    assert!(
                        (w as f64 - e[j] / s).abs() < 1e-5,
                        "{name}, layer {l}, position {t}: weight {w} vs {}",
                        e[j] / s
                    );
                }
                let p: f32 = probs.data()[t * 8..(t + 1) * 8].iter().sum();
                assert!((p - 1.0).abs() < 1e-5, "{name}: probabilities sum to {p}");
            }
        }
    }
}

/// Sigmoid gating and shared experts are refused naming the key.
#[test]
fn unsupported_expert_keys_are_refused_by_name() {
    for (file, key) in [
        ("qwen3moe-sigmoid.gguf", "qwen3moe.expert_gating_func"),
        ("qwen3moe-shared.gguf", "qwen3moe.expert_shared_count"),
    ] {
        let path = data_dir().join(file);
        let err = match lucent::open(path.to_str().expect("utf-8")) {
            Ok(_) => panic!("{file}: opened"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(key), "{file}: {err}");
    }
}

/// `lucent inspect`'s report of each file shows n and k as the script wrote them, and
/// Qwen3-MoE's expert width; a dense file shows none.
#[test]
fn inspect_shows_the_experts() {
    let reference = reference();
    for (name, width) in [("qwen3moe", Some(64)), ("mixtral", None)] {
        let r = lucent::pipeline::inspect::inspect_gguf(&data_dir().join(format!("{name}.gguf")))
            .expect("inspect");
        let h = &r.hparams;
        assert_eq!(
            (
                h.expert_count,
                h.expert_used_count,
                h.expert_feed_forward_length
            ),
            (
                Some(reference.meta.experts),
                Some(reference.meta.used),
                width
            ),
            "{name}"
        );
    }
    let dense =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/gguf_families/qwen3.gguf");
    let r = lucent::pipeline::inspect::inspect_gguf(&dense).expect("inspect");
    assert_eq!(r.hparams.expert_count, None);
}
