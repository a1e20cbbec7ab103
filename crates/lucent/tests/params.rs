//! Presets, exact parameter counts, memory figures and forward-pass shapes.
//!
//! Parameter counts are integers and must match tests/data/seed_examples.json exactly
//! (tolerance: none). Memory figures are exact byte counts.

use lucent::model::memory::{human_bytes, thousands, MemoryEstimate};
use lucent::model::params::ParamCount;
use lucent::model::presets::{preset, resolve, ConfigOverrides, PRESETS};
use lucent::model::shapes::forward_shapes;
use lucent::Dtype;

fn seed() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/seed_examples.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn total(name: &str) -> u64 {
    ParamCount::of(&preset(name).unwrap()).unwrap().total()
}

#[test]
fn totals_match_the_golden_counts_exactly() {
    let seed = seed();
    let counts = &seed["parameter_counts"];
    for (preset_name, key) in [
        ("bert-base", "bert-base-uncased"),
        ("gpt2", "gpt2"),
        ("llama-7b", "llama-7b"),
        ("minilm", "all-MiniLM-L6-v2"),
        ("smollm2", "SmolLM2-135M"),
    ] {
        let want = counts[key].as_u64().unwrap();
        assert_eq!(total(preset_name), want, "{preset_name} vs golden {key}");
    }
    // The same numbers written out, so a changed JSON cannot hide a regression.
    assert_eq!(total("bert-base"), 109_482_240);
    assert_eq!(total("gpt2"), 124_439_808);
    assert_eq!(total("llama-7b"), 6_738_415_616);
    assert_eq!(total("minilm"), 22_713_216);
    assert_eq!(total("smollm2"), 134_515_008);
}

#[test]
fn gemma3_and_transformer_base_totals() {
    // Gemma 3 270M: 167,772,160 embedding + 18 × 5,573,632 + 640 final norm.
    assert_eq!(total("gemma3"), 268_098_176);
    // The paper's base model (shared embedding, tied head, no final norms):
    // 18,944,000 + 6 × 3,152,384 + 6 × 4,204,032.
    assert_eq!(total("transformer-base"), 63_082_496);
}

#[test]
fn guide_problem_1_from_bert_base_and_from_custom_flags() {
    let seed = seed();
    let g = &seed["parameter_counts"]["guide_problem_1"];
    let want = [
        g["q_projection_one_head"].as_u64().unwrap(),
        g["mha_four_matrices_no_bias"].as_u64().unwrap(),
        g["ffn_with_bias"].as_u64().unwrap(),
        g["layer_norm_params_per_layer"].as_u64().unwrap(),
    ];
    assert_eq!(want, [49_152, 2_359_296, 4_722_432, 3_072]);
    let custom = resolve(
        None,
        &ConfigOverrides {
            d_model: Some(768),
            heads: Some(12),
            d_ff: Some(3072),
            ..Default::default()
        },
    )
    .unwrap();
    for cfg in [
        preset("bert-base").unwrap(),
        preset("gpt2").unwrap(),
        custom,
    ] {
        let f = ParamCount::of(&cfg).unwrap().guide_figures(&cfg);
        let got = [
            f.q_projection_one_head,
            f.attention_four_matrices_no_bias,
            f.ffn,
            f.norms_per_layer,
        ];
        assert_eq!(got, want, "{}", cfg.family);
    }
}

#[test]
fn breakdown_components_of_bert_and_smollm2() {
    let bert = ParamCount::of(&preset("bert-base").unwrap()).unwrap();
    assert_eq!(bert.token_embeddings, 30522 * 768);
    assert_eq!(bert.position_embeddings, 512 * 768);
    assert_eq!(bert.token_type_embeddings, 2 * 768);
    assert_eq!(bert.embedding_norm, 2 * 768);
    assert_eq!(bert.pooler, 768 * 768 + 768);
    assert_eq!(bert.head, 0);
    let layer = bert.stacks[0].layer;
    assert_eq!(layer.self_attention.q_weight, 768 * 768);
    assert_eq!(layer.self_attention.q_bias, 768);
    assert_eq!(layer.self_attention.total(), 4 * (768 * 768 + 768));
    assert_eq!(layer.total(), 7_087_872);
    assert_eq!(bert.stacks[0].layers, 12);

    let smol = ParamCount::of(&preset("smollm2").unwrap()).unwrap();
    let a = smol.stacks[0].layer.self_attention;
    // GQA: K and V are 576 × (3 · 64) = 576 × 192.
    assert_eq!(
        (a.q_weight, a.k_weight, a.v_weight, a.o_weight),
        (331_776, 110_592, 110_592, 331_776)
    );
    assert_eq!(a.biases(), 0);
    assert_eq!(smol.stacks[0].layer.ffn.total(), 3 * 576 * 1536);
    assert_eq!(smol.stacks[0].layer.norms(), 2 * 576);
    assert_eq!(smol.stacks[0].final_norm, 576);
    assert!(smol.head_tied);
    assert_eq!(smol.head, 0);

    let llama = ParamCount::of(&preset("llama-7b").unwrap()).unwrap();
    assert!(!llama.head_tied);
    assert_eq!(llama.head, 32000 * 4096);

    let gemma = ParamCount::of(&preset("gemma3").unwrap()).unwrap();
    let l = gemma.stacks[0].layer;
    assert_eq!(l.norm_count, 4, "sandwich norms: 4 per layer");
    assert_eq!(l.self_attention.qk_norm, 2 * 256);
    assert_eq!(l.self_attention.q_weight, 640 * 1024);
    assert_eq!(l.self_attention.k_weight, 640 * 256);

    let t = ParamCount::of(&preset("transformer-base").unwrap()).unwrap();
    assert_eq!(t.stacks.len(), 2);
    assert!(t.stacks[0].layer.cross_attention.is_none());
    assert_eq!(
        t.stacks[1].layer.cross_attention,
        Some(t.stacks[1].layer.self_attention)
    );
    assert_eq!(t.stacks[1].layer.norm_count, 3);
    assert_eq!(t.position_embeddings, 0, "sinusoidal: no parameters");
}

#[test]
fn overrides_change_the_count() {
    // gpt2 with 6 layers: 6 fewer layers of 7,087,872.
    let six = resolve(
        Some("gpt2"),
        &ConfigOverrides {
            layers: Some(6),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        ParamCount::of(&six).unwrap().total(),
        124_439_808 - 6 * 7_087_872
    );
    // Gemma 3 keeps its own head_dim (256) when only the heads change.
    let g = resolve(
        Some("gemma3"),
        &ConfigOverrides {
            heads: Some(8),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((g.n_heads, g.n_kv_heads, g.head_dim), (8, 1, 256));
    // A multi-head base stays multi-head when the heads change.
    let m = resolve(
        Some("bert-base"),
        &ConfigOverrides {
            heads: Some(8),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((m.n_heads, m.n_kv_heads, m.head_dim), (8, 8, 96));
    // kv heads: 1 = multi-query.
    let mq = resolve(
        Some("gpt2"),
        &ConfigOverrides {
            kv_heads: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    let a = ParamCount::of(&mq).unwrap().stacks[0].layer.self_attention;
    assert_eq!(a.k_weight, 768 * 64);
}

#[test]
fn bad_inputs_are_errors_that_say_why() {
    let e = preset("gpt-5").unwrap_err().to_string();
    for p in PRESETS {
        assert!(e.contains(p.name), "{e}");
    }
    let e = resolve(
        None,
        &ConfigOverrides {
            d_model: Some(10),
            heads: Some(3),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("d_model (10) must be divisible by heads (3)"),
        "{e}"
    );
    let e = resolve(
        None,
        &ConfigOverrides {
            heads: Some(12),
            kv_heads: Some(5),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("heads (12) must be divisible by kv_heads (5)"),
        "{e}"
    );
    for (o, field) in [
        (
            ConfigOverrides {
                heads: Some(0),
                ..Default::default()
            },
            "heads",
        ),
        (
            ConfigOverrides {
                d_model: Some(0),
                ..Default::default()
            },
            "d_model",
        ),
        (
            ConfigOverrides {
                layers: Some(0),
                ..Default::default()
            },
            "layers",
        ),
        (
            ConfigOverrides {
                vocab_size: Some(0),
                ..Default::default()
            },
            "vocab",
        ),
        (
            ConfigOverrides {
                max_positions: Some(0),
                ..Default::default()
            },
            "max_len",
        ),
    ] {
        let e = resolve(None, &o).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("> 0"), "{e}");
    }
    let e = resolve(
        Some("gpt2"),
        &ConfigOverrides {
            encoder_layers: Some(2),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("decoder only"), "{e}");
    // Too large to count: an error naming the sizes when the config is made (before any
    // count could wrap), and ParamCount refuses such a config too.
    let overrides = ConfigOverrides {
        vocab_size: Some(usize::MAX / 2),
        ..Default::default()
    };
    let e = resolve(None, &overrides).unwrap_err().to_string();
    assert!(
        e.contains("vocab_size") && e.contains("more than any memory holds"),
        "{e}"
    );
    let mut huge = preset("gpt2").unwrap();
    huge.vocab_size = usize::MAX / 2;
    assert!(ParamCount::of(&huge).is_err());

    let cfg = preset("gpt2").unwrap();
    assert!(MemoryEstimate::of(&cfg, 0, 10, Dtype::F32).is_err());
    assert!(MemoryEstimate::of(&cfg, 1, 0, Dtype::F32).is_err());
    assert!(forward_shapes(&cfg, 0, 10, None).is_err());
    assert!(forward_shapes(&cfg, 1, 0, None).is_err());
    assert!(
        forward_shapes(&cfg, 1, 4, Some(3)).is_err(),
        "src_seq on a decoder"
    );
}

#[test]
fn attention_scores_at_2048_tokens_are_16_mib_per_head_in_f32() {
    let cfg = preset("gpt2").unwrap();
    let m = MemoryEstimate::of(&cfg, 1, 2048, Dtype::F32).unwrap();
    assert_eq!(m.scores_per_head, 16_777_216);
    assert_eq!(human_bytes(m.scores_per_head), "16.00 MiB");
    assert_eq!(m.scores_per_layer, 12 * 16_777_216);
    assert_eq!(m.attention_layers, 12);
    assert_eq!(m.scores_all_layers, 12 * 12 * 16_777_216);
    // Weights: 124,439,808 × 4 B.
    assert_eq!(m.weights, 124_439_808 * 4);
    // KV cache: 2 · 12 layers · 1 · 12 heads · 2048 · 64 · 4 B = 144 MiB.
    assert_eq!(m.kv_cache, 2 * 12 * 12 * 2048 * 64 * 4);
    assert_eq!(m.kv_cache_windowed, m.kv_cache);
    assert_eq!(m.cross_kv, 0);
    // O(T²): doubling T quadruples the scores; halving the bytes halves them.
    let m2 = MemoryEstimate::of(&cfg, 1, 4096, Dtype::F32).unwrap();
    assert_eq!(m2.scores_per_head, 4 * m.scores_per_head);
    let h = MemoryEstimate::of(&cfg, 1, 2048, Dtype::BF16).unwrap();
    assert_eq!(h.scores_per_head, 8_388_608);
    assert_eq!(thousands(h.scores_per_head), "8,388,608");
}

#[test]
fn kv_cache_with_gqa_window_and_encoders() {
    // SmolLM2: 2 · 30 · b 2 · 3 kv heads · 1000 · 64 · 2 B (bf16).
    let smol = preset("smollm2").unwrap();
    let m = MemoryEstimate::of(&smol, 2, 1000, Dtype::BF16).unwrap();
    assert_eq!(m.kv_cache, 2 * 30 * 2 * 3 * 1000 * 64 * 2);
    // Gemma 3 at T = 2048: 3 global layers keep 2048 positions, 15 local layers 512.
    let gemma = preset("gemma3").unwrap();
    let g = MemoryEstimate::of(&gemma, 1, 2048, Dtype::F32).unwrap();
    let row = 2 * 256 * 4; // 2 · h_kv (1) · d_k · bytes
    assert_eq!(g.kv_cache, 18 * 2048 * row);
    assert_eq!(g.kv_cache_windowed, (3 * 2048 + 15 * 512) * row);
    // BERT does not decode: no KV cache.
    let bert = MemoryEstimate::of(&preset("bert-base").unwrap(), 1, 512, Dtype::F32).unwrap();
    assert_eq!(bert.kv_cache, 0);
    assert_eq!(bert.attention_layers, 12);
    // The encoder-decoder: 6 encoder self + 6 decoder self + 6 cross score matrices.
    let t = MemoryEstimate::of(&preset("transformer-base").unwrap(), 1, 10, Dtype::F32).unwrap();
    assert_eq!(t.attention_layers, 18);
    assert_eq!(t.cross_kv, t.kv_cache);
    assert_eq!(t.kv_cache, 2 * 6 * 8 * 10 * 64 * 4);
}

fn shapes_of(stage: &str, steps: &[lucent::model::ShapeStep]) -> Vec<Vec<usize>> {
    steps
        .iter()
        .filter(|s| s.stage == stage)
        .map(|s| s.shape.clone())
        .collect()
}

#[test]
fn guide_problem_2_shapes() {
    // B = 4, T = 10, d = 512, h = 8, d_ff = 2048: the transformer-base preset.
    let cfg = preset("transformer-base").unwrap();
    let steps = forward_shapes(&cfg, 4, 10, None).unwrap();
    let encoder = shapes_of("encoder", &steps);
    let want: Vec<Vec<usize>> = vec![
        vec![4, 10],        // token ids
        vec![4, 10, 512],   // embedding × √d
        vec![4, 10, 512],   // + positions
        vec![4, 10, 512],   // Q
        vec![4, 10, 512],   // K
        vec![4, 10, 512],   // V
        vec![4, 8, 10, 64], // split heads Q
        vec![4, 8, 10, 64], // split heads K, V
        vec![4, 8, 10, 10], // scores
        vec![4, 8, 10, 10], // softmax weights
        vec![4, 8, 10, 64], // context
        vec![4, 10, 512],   // merge heads
        vec![4, 10, 512],   // W_O
        vec![4, 10, 512],   // residual + norm
        vec![4, 10, 2048],  // FFN W₁
        vec![4, 10, 2048],  // ReLU
        vec![4, 10, 512],   // FFN W₂
        vec![4, 10, 512],   // residual + norm
    ];
    assert_eq!(encoder, want);
    let dims: Vec<&str> = steps
        .iter()
        .filter(|s| s.stage == "encoder")
        .map(|s| s.dims.as_str())
        .collect();
    assert_eq!(dims[6], "(b, h, t_src, d_k)");
    assert_eq!(dims[8], "(b, h, t_src, t_src)");
    assert!(steps
        .iter()
        .filter(|s| s.stage == "encoder")
        .skip(3)
        .all(|s| s.repeat == 6));
    // Output: logits (4, 10, 37000).
    assert_eq!(steps.last().unwrap().shape, vec![4, 10, 37000]);
    assert_eq!(steps.last().unwrap().dims, "(b, t_tgt, V)");
}

#[test]
fn cross_attention_scores_are_target_by_source() {
    let cfg = preset("transformer-base").unwrap();
    let steps = forward_shapes(&cfg, 4, 10, Some(7)).unwrap();
    let cross: Vec<_> = steps
        .iter()
        .filter(|s| s.name.starts_with("cross-attention: scores"))
        .collect();
    assert_eq!(cross.len(), 1);
    assert_eq!(cross[0].shape, vec![4, 8, 10, 7]);
    assert_eq!(cross[0].dims, "(b, h, t_tgt, t_src)");
    let kv = steps
        .iter()
        .find(|s| s.name.starts_with("cross-attention: split heads K"))
        .unwrap();
    assert_eq!(kv.shape, vec![4, 8, 7, 64]);
    // The encoder runs on 7 tokens, the decoder on 10.
    assert_eq!(shapes_of("encoder", &steps)[0], vec![4, 7]);
    assert_eq!(shapes_of("decoder", &steps)[0], vec![4, 10]);
}

#[test]
fn gqa_and_gated_shapes_for_smollm2_and_gemma3() {
    let steps = forward_shapes(&preset("smollm2").unwrap(), 2, 5, None).unwrap();
    let find = |name: &str| {
        steps
            .iter()
            .find(|s| s.name.contains(name))
            .unwrap()
            .clone()
    };
    assert_eq!(find("Q = x W_Q").shape, vec![2, 5, 576]);
    assert_eq!(find("K = x W_K").shape, vec![2, 5, 192]);
    assert_eq!(find("K = x W_K").dims, "(b, t, h_kv·d_k)");
    assert_eq!(find("split heads K").shape, vec![2, 3, 5, 64]);
    assert_eq!(find("scores").shape, vec![2, 9, 5, 5]);
    assert_eq!(find("gate").shape, vec![2, 5, 1536]);
    assert_eq!(steps.last().unwrap().shape, vec![2, 5, 49152]);

    let g = forward_shapes(&preset("gemma3").unwrap(), 1, 3, None).unwrap();
    let q = g.iter().find(|s| s.name.contains("Q = x W_Q")).unwrap();
    assert_eq!(q.shape, vec![1, 3, 1024], "h · d_k = 4 · 256, not d");
    let merge = g.iter().find(|s| s.name.contains("merge heads")).unwrap();
    assert_eq!(merge.shape, vec![1, 3, 1024]);
    let out = g
        .iter()
        .find(|s| s.name.contains("output projection"))
        .unwrap();
    assert_eq!(out.shape, vec![1, 3, 640]);

    let bert = forward_shapes(&preset("bert-base").unwrap(), 2, 8, None).unwrap();
    assert_eq!(bert.last().unwrap().shape, vec![2, 768], "pooled [CLS]");
}
