//! `nn` held to PyTorch golden files (tests/data/modules, made with torch.nn modules in
//! eval mode; see tests/data/modules metadata) and to the guides' seed examples.
//!
//! Tolerances: single modules (attention) 1e-5 absolute; layers and stacks 1e-4; seed
//! examples 1e-6.

use lucent::io::safetensors::SafetensorsFile;
use lucent::model::config::NormPlacement;
use lucent::nn::{
    scaled_dot_product_attention, AttentionConfig, AttentionOptions, Decoder, DecoderLayer,
    Encoder, EncoderLayer, FeedForward, LayerNorm, Linear, MultiHeadAttention, Norm, RopeSpec,
    Trace, Transformer,
};
use lucent::ops::{Activation, RopeConvention};
use lucent::Tensor;

fn data(path: &str) -> String {
    format!("{}/../../tests/data/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn open(name: &str) -> SafetensorsFile {
    SafetensorsFile::open(data(&format!("modules/{name}.safetensors"))).unwrap()
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f32) {
    let d = got
        .max_abs_diff(want)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!("{what}: max |diff| {d:e}");
    assert!(d <= tol, "{what}: max |diff| {d:e} > {tol:e}");
}

/// A torch `nn.MultiheadAttention` under `prefix` (in_proj_weight, out_proj.*).
fn torch_mha(st: &SafetensorsFile, prefix: &str, heads: usize) -> MultiHeadAttention {
    let t = |n: &str| st.tensor(&format!("{prefix}{n}")).unwrap();
    MultiHeadAttention::from_in_proj(
        heads,
        &t("in_proj_weight"),
        Some(&t("in_proj_bias")),
        t("out_proj.weight"),
        Some(t("out_proj.bias")),
    )
    .unwrap()
}

fn torch_ln(st: &SafetensorsFile, prefix: &str, eps: f32) -> Norm {
    let t = |n: &str| st.tensor(&format!("{prefix}{n}")).unwrap();
    Norm::Layer(LayerNorm::new(t("weight"), Some(t("bias")), eps).unwrap())
}

fn torch_linear(st: &SafetensorsFile, prefix: &str) -> Linear {
    let t = |n: &str| st.tensor(&format!("{prefix}{n}")).unwrap();
    Linear::new(t("weight"), Some(t("bias"))).unwrap()
}

fn activation_of(st: &SafetensorsFile) -> Activation {
    match st.metadata()["activation"].trim_matches('"') {
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        other => panic!("unknown activation {other}"),
    }
}

fn placement_of(st: &SafetensorsFile) -> NormPlacement {
    if st.metadata()["norm_first"] == "true" {
        NormPlacement::Pre
    } else {
        NormPlacement::Post
    }
}

/// A `torch.nn.TransformerEncoderLayer` under `prefix`.
fn torch_encoder_layer(st: &SafetensorsFile, prefix: &str) -> EncoderLayer {
    let heads = st.meta_f64("heads").unwrap() as usize;
    let eps = st.meta_f64("layer_norm_eps").unwrap_or(1e-5) as f32; // torch's default
    let ffn = FeedForward::mlp(
        torch_linear(st, &format!("{prefix}linear1.")),
        torch_linear(st, &format!("{prefix}linear2.")),
        activation_of(st),
    )
    .unwrap();
    EncoderLayer::new(
        placement_of(st),
        torch_mha(st, &format!("{prefix}self_attn."), heads),
        torch_ln(st, &format!("{prefix}norm1."), eps),
        ffn,
        torch_ln(st, &format!("{prefix}norm2."), eps),
    )
    .unwrap()
}

/// A `torch.nn.TransformerDecoderLayer` under `prefix`.
fn torch_decoder_layer(st: &SafetensorsFile, prefix: &str) -> DecoderLayer {
    let heads = st.meta_f64("heads").unwrap() as usize;
    let eps = st.meta_f64("layer_norm_eps").unwrap_or(1e-5) as f32; // torch's default
    let ffn = FeedForward::mlp(
        torch_linear(st, &format!("{prefix}linear1.")),
        torch_linear(st, &format!("{prefix}linear2.")),
        activation_of(st),
    )
    .unwrap();
    DecoderLayer::new(
        placement_of(st),
        torch_mha(st, &format!("{prefix}self_attn."), heads),
        torch_ln(st, &format!("{prefix}norm1."), eps),
        Some((
            torch_mha(st, &format!("{prefix}multihead_attn."), heads),
            torch_ln(st, &format!("{prefix}norm2."), eps),
        )),
        ffn,
        torch_ln(st, &format!("{prefix}norm3."), eps),
    )
    .unwrap()
}

/// A key padding mask (b, t), 1 = padded key, as an additive bias (b, 1, t_q, t).
fn padding_bias(mask: &Tensor, t_q: usize) -> Tensor {
    let [b, t] = mask.dims().unwrap();
    let m = mask.data().to_vec();
    Tensor::from_fn(&[b, 1, t_q, t], |i| {
        let (bi, j) = (i / (t_q * t), i % t);
        if m[bi * t + j] > 0.5 {
            f32::NEG_INFINITY
        } else {
            0.0
        }
    })
}

// ------------------------------------------------------------------- the guides' examples

fn json_matrix(v: &serde_json::Value) -> Tensor {
    let rows: Vec<Vec<f32>> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    Tensor::from_rows(&rows).unwrap()
}

#[test]
fn seed_examples_scaled_dot_product_attention() {
    let text = std::fs::read_to_string(data("seed_examples.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tol = 1e-6;

    let ex = &json["attention_seed42"];
    let (q, k, v) = (
        json_matrix(&ex["Q"]),
        json_matrix(&ex["K"]),
        json_matrix(&ex["V"]),
    );
    let (out, w) =
        scaled_dot_product_attention(&q, &k, &v, &AttentionOptions::none().with_weights()).unwrap();
    assert_close(
        "seed42 weights",
        &w.unwrap(),
        &json_matrix(&ex["weights"]),
        tol,
    );
    assert_close("seed42 output", &out, &json_matrix(&ex["output"]), tol);

    let ex = &json["causal_attention"];
    let (q, k, v) = (
        json_matrix(&ex["Q"]),
        json_matrix(&ex["K"]),
        json_matrix(&ex["V"]),
    );
    // The example's mask is 1 = visible: as an additive bias 0 / −∞ ...
    let bias = json_matrix(&ex["mask"]).map(|m| if m > 0.5 { 0.0 } else { f32::NEG_INFINITY });
    let (out, w) = scaled_dot_product_attention(
        &q,
        &k,
        &v,
        &AttentionOptions::none().with_bias(&bias).with_weights(),
    )
    .unwrap();
    assert_close(
        "causal weights (bias)",
        &w.unwrap(),
        &json_matrix(&ex["weights"]),
        tol,
    );
    assert_close(
        "causal output (bias)",
        &out,
        &json_matrix(&ex["output"]),
        tol,
    );
    // ... and the same through the causal rule.
    let (out, _) = scaled_dot_product_attention(&q, &k, &v, &AttentionOptions::causal()).unwrap();
    assert_close(
        "causal output (rule)",
        &out,
        &json_matrix(&ex["output"]),
        tol,
    );
}

// ------------------------------------------------------------------- attention modules

#[test]
fn mha_matches_torch_multihead_attention() {
    let st = open("mha");
    let mha = torch_mha(&st, "weights.", 4);
    let x = st.tensor("x").unwrap();
    let [_, t, _] = x.dims().unwrap();
    let tol = 1e-5;
    let pad = padding_bias(&st.tensor("padding_mask").unwrap(), t);
    for (case, opts) in [
        ("none", AttentionOptions::none()),
        ("causal", AttentionOptions::causal()),
        ("padding", AttentionOptions::none().with_bias(&pad)),
    ] {
        let r = mha.forward_self(&x, &opts.with_weights(), None).unwrap();
        assert_close(
            &format!("mha out.{case}"),
            &r.output,
            &st.tensor(&format!("out.{case}")).unwrap(),
            tol,
        );
        let w = r.weights.expect("weights were asked for");
        assert_close(
            &format!("mha attn.{case}"),
            &w,
            &st.tensor(&format!("attn.{case}")).unwrap(),
            tol,
        );
    }
    // Without asking, no weights.
    assert!(mha
        .forward_self(&x, &AttentionOptions::none(), None)
        .unwrap()
        .weights
        .is_none());
}

#[test]
fn gqa_with_rope_matches_pytorch() {
    let st = open("gqa_rope");
    let tol = 1e-5;
    let t = |n: &str| st.tensor(n).unwrap();
    let mut cfg = AttentionConfig::new(32, 4)
        .unwrap()
        .with_kv_heads(2)
        .unwrap();
    assert_eq!(cfg.head_dim, st.meta_f64("head_dim").unwrap() as usize);
    cfg.qkv_bias = false;
    cfg.out_bias = false;
    cfg.rope = Some(RopeSpec::plain(
        st.meta_f64("rope_theta").unwrap() as f32,
        RopeConvention::RotateHalf,
    ));
    let lin = |n: &str| Linear::new(t(n), None).unwrap();
    let mha = MultiHeadAttention::new(cfg, lin("wq"), lin("wk"), lin("wv"), lin("wo"), None, None)
        .unwrap();
    let mut trace = Trace::new();
    let r = mha
        .forward_self(
            &t("x"),
            &AttentionOptions::causal().with_weights(),
            Some(&mut trace),
        )
        .unwrap();
    assert_close("gqa out", &r.output, &t("out"), tol);
    assert_close("gqa attn", r.weights.as_ref().unwrap(), &t("attn"), tol);
    assert_close(
        "gqa q_rotated (trace)",
        trace.get("q").unwrap(),
        &t("q_rotated"),
        tol,
    );
    assert_eq!(
        trace.get("k").unwrap().shape(),
        [1, 2, 7, 8],
        "k keeps its 2 kv heads"
    );
    // The trace's own steps agree with each other: softmax(scaled + mask) = weights.
    let pre = trace
        .get("scaled")
        .unwrap()
        .add(trace.get("mask").unwrap())
        .unwrap();
    assert_close(
        "trace softmax(scaled + mask)",
        &lucent::ops::softmax(&pre),
        trace.get("weights").unwrap(),
        1e-6,
    );
    assert_eq!(
        trace.get("scores").unwrap().shape(),
        [1, 4, 7, 7],
        "scores are per query head"
    );
}

// ------------------------------------------------------------------- layers

fn check_encoder_layer(name: &str) {
    let st = open(name);
    let layer = torch_encoder_layer(&st, "weights.");
    let x = st.tensor("x").unwrap();
    let [b, t, d] = x.dims().unwrap();
    let mask = st.tensor("padding_mask").unwrap();
    let bias = padding_bias(&mask, t);
    let got = layer
        .forward(&x, &AttentionOptions::none().with_bias(&bias), None)
        .unwrap();
    let want = st.tensor("out").unwrap();
    let tol = 1e-4;
    let mut compared = 0;
    for bi in 0..b {
        for ti in 0..t {
            if mask.data()[bi * t + ti] > 0.5 {
                continue; // padding rows: PyTorch's fast path leaves them undefined
            }
            let r = (bi * t + ti) * d;
            let g = Tensor::from_slice(&got.data()[r..r + d]);
            let w = Tensor::from_slice(&want.data()[r..r + d]);
            assert_close(&format!("{name} row ({bi}, {ti})"), &g, &w, tol);
            compared += 1;
        }
    }
    assert!(compared > b, "{name}: compared only {compared} rows");
}

#[test]
fn encoder_layer_post_norm_relu_matches_torch() {
    check_encoder_layer("encoder_layer_postln_relu");
}

#[test]
fn encoder_layer_pre_norm_gelu_matches_torch() {
    check_encoder_layer("encoder_layer_preln_gelu");
}

#[test]
fn decoder_layer_matches_torch() {
    let st = open("decoder_layer");
    let layer = torch_decoder_layer(&st, "weights.");
    let (tgt, memory) = (st.tensor("tgt").unwrap(), st.tensor("memory").unwrap());
    let mut trace = Trace::only(&["weights"]);
    let got = layer
        .forward(
            &tgt,
            Some(&memory),
            &AttentionOptions::none(),
            None,
            None,
            Some(&mut trace),
        )
        .unwrap();
    assert_close("decoder layer", &got, &st.tensor("out").unwrap(), 1e-4);
    let names: Vec<&str> = trace.names().collect();
    assert_eq!(names, ["attn.weights", "cross_attn.weights"]);
    assert_eq!(
        trace.get("cross_attn.weights").unwrap().shape(),
        [2, 4, 4, 6]
    );
}

#[test]
fn transformer_matches_torch() {
    let st = open("transformer");
    let eps = 1e-5;
    let n_enc = st.meta_f64("encoder_layers").unwrap() as usize;
    let n_dec = st.meta_f64("decoder_layers").unwrap() as usize;
    let encoder = Encoder::new(
        (0..n_enc)
            .map(|i| torch_encoder_layer(&st, &format!("weights.encoder.layers.{i}.")))
            .collect(),
        Some(torch_ln(&st, "weights.encoder.norm.", eps)),
    )
    .unwrap();
    let decoder = Decoder::new(
        (0..n_dec)
            .map(|i| torch_decoder_layer(&st, &format!("weights.decoder.layers.{i}.")))
            .collect(),
        Some(torch_ln(&st, "weights.decoder.norm.", eps)),
    )
    .unwrap();
    let model = Transformer::new(encoder, decoder).unwrap();
    let (src, tgt) = (st.tensor("src").unwrap(), st.tensor("tgt").unwrap());
    let mut trace = Trace::only(&["weights", "output"]).in_layers(&[1]);
    let out = model
        .forward(
            &src,
            &tgt,
            &AttentionOptions::none(),
            &AttentionOptions::none(),
            None,
            Some(&mut trace),
        )
        .unwrap();
    assert_close("transformer", &out, &st.tensor("out").unwrap(), 1e-4);
    assert_eq!(trace.get("decoder.output").unwrap().data(), out.data());
    assert!(trace.get("encoder.layer.1.attn.weights").is_some());
    assert!(trace.get("decoder.layer.1.cross_attn.weights").is_some());
    assert!(
        trace.get("encoder.layer.0.attn.weights").is_none(),
        "layer filter"
    );
    assert!(trace.names().all(|n| !n.ends_with(".q")), "leaf filter");
}
