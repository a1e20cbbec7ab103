//! Training held to PyTorch: tests/data/training/tiny_gpt.safetensors holds a 2-layer GPT
//! (learned positions, pre-norm, tanh-GELU, tied head; V 65, block 8, d 32, 4 heads,
//! d_ff 128), a batch, PyTorch's logits and loss, the gradient of every weight (`grad.`)
//! and the weights after one AdamW step (`step1.`; lr 0.01, betas (0.9, 0.95), eps 1e-8,
//! weight decay 0.1 on every tensor).
//!
//! lucent builds the same model from its own `nn` blocks (the c_attn matrix split into
//! W_Q, W_K, W_V by `MultiHeadAttention::from_in_proj`), runs forward and backward, and
//! one `AdamW` step. Tolerances (from the issue): logits 1e-5, loss 1e-6, gradients 1e-4
//! relative or 1e-6 absolute, weights after the step 1e-6.

use lucent::io::safetensors::SafetensorsFile;
use lucent::model::config::NormPlacement;
use lucent::model::DecoderModel;
use lucent::nn::position::AbsolutePositions;
use lucent::nn::position::LearnedPositions;
use lucent::nn::{
    Decoder, DecoderLayer, Embedding, FeedForward, LayerNorm, Linear, MultiHeadAttention, Norm,
};
use lucent::ops::Activation;
use lucent::train::models::{gpt_config, Dims};
use lucent::train::optim::{AdamW, DecayRule};
use lucent::train::Parameters;
use lucent::Tensor;

fn path() -> String {
    format!(
        "{}/../../tests/data/training/tiny_gpt.safetensors",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The GPT from the file's weights, every tensor read with `prefix` ("" or "step1.").
fn load(f: &SafetensorsFile, prefix: &str) -> DecoderModel {
    let t = |name: &str| f.tensor(&format!("{prefix}{name}")).unwrap();
    let ln = |name: &str| {
        Norm::Layer(
            LayerNorm::new(
                t(&format!("{name}.weight")),
                Some(t(&format!("{name}.bias"))),
                1e-5,
            )
            .unwrap(),
        )
    };
    let lin = |name: &str| {
        Linear::new(
            t(&format!("{name}.weight")),
            Some(t(&format!("{name}.bias"))),
        )
        .unwrap()
    };
    let layers = (0..2)
        .map(|i| {
            let h = format!("h.{i}");
            let attn = MultiHeadAttention::from_in_proj(
                4,
                &t(&format!("{h}.attn.c_attn.weight")),
                Some(&t(&format!("{h}.attn.c_attn.bias"))),
                t(&format!("{h}.attn.c_proj.weight")),
                Some(t(&format!("{h}.attn.c_proj.bias"))),
            )
            .unwrap();
            let ffn = FeedForward::mlp(
                lin(&format!("{h}.mlp.c_fc")),
                lin(&format!("{h}.mlp.c_proj")),
                Activation::GeluTanh,
            )
            .unwrap();
            DecoderLayer::new(
                NormPlacement::Pre,
                attn,
                ln(&format!("{h}.ln_1")),
                None,
                ffn,
                ln(&format!("{h}.ln_2")),
            )
            .unwrap()
        })
        .collect();
    let dims = Dims {
        layers: 2,
        d_model: 32,
        heads: 4,
        d_ff: 128,
        block: 8,
        vocab: 65,
    };
    DecoderModel {
        config: gpt_config(&dims).unwrap(),
        embedding: Embedding::new(t("wte"), 1.0).unwrap(),
        positions: Some(AbsolutePositions::Learned(
            LearnedPositions::new(t("wpe")).unwrap(),
        )),
        decoder: Decoder::new(layers, Some(ln("ln_f"))).unwrap(),
        head: None,
        numerics: lucent::Numerics::Lucent,
    }
}

/// lucent's parameter holding the file's tensor `name` (c_attn stacks q, k, v).
fn lucent_view(named: &[(String, Tensor)], name: &str, get: impl Fn(&Tensor) -> Tensor) -> Tensor {
    let find = |n: &str| -> Tensor {
        let t = &named
            .iter()
            .find(|(k, _)| k == n)
            .unwrap_or_else(|| panic!("no parameter {n}"))
            .1;
        get(t)
    };
    let layer = |rest: &str| -> String {
        let (i, tail) = rest.split_once('.').unwrap();
        format!("decoder.layers.{i}.{tail}")
    };
    let mapped = match name {
        "wte" => "embed.weight".to_string(),
        "wpe" => "positions.weight".to_string(),
        "ln_f.weight" => "decoder.final_norm.weight".to_string(),
        "ln_f.bias" => "decoder.final_norm.bias".to_string(),
        n => {
            let rest = n.strip_prefix("h.").unwrap();
            let (i, tail) = rest.split_once('.').unwrap();
            if let Some(kind) = tail.strip_prefix("attn.c_attn.") {
                let parts: Vec<Tensor> = ["q_proj", "k_proj", "v_proj"]
                    .iter()
                    .map(|p| find(&layer(&format!("{i}.self_attn.{p}.{kind}"))))
                    .collect();
                return Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0).unwrap();
            }
            let tail = tail
                .replace("attn.c_proj", "self_attn.o_proj")
                .replace("mlp.c_fc", "ffn.w1")
                .replace("mlp.c_proj", "ffn.w2")
                .replace("ln_1", "self_attn_norm")
                .replace("ln_2", "ffn_norm");
            layer(&format!("{i}.{tail}"))
        }
    };
    find(&mapped)
}

fn ids(t: &Tensor) -> Vec<Vec<usize>> {
    t.to_rows()
        .iter()
        .map(|r| r.iter().map(|&v| v as usize).collect())
        .collect()
}

#[test]
fn tiny_gpt_logits_loss_gradients_and_one_adamw_step_match_pytorch() {
    let f = SafetensorsFile::open(path()).unwrap();
    let mut model = load(&f, "");
    model.requires_grad();
    let (idx, targets) = (
        ids(&f.tensor("idx").unwrap()),
        ids(&f.tensor("targets").unwrap()),
    );

    let logits = model.forward_batch(&idx, None, None).unwrap();
    let want = f.tensor("logits").unwrap();
    let err = logits.max_abs_diff(&want).unwrap();
    assert!(err <= 1e-5, "logits differ by {err} (tolerance 1e-5)");

    let loss = lucent::ops::cross_entropy(&logits, &targets.concat(), None).unwrap();
    let want_loss = f.tensor("loss").unwrap().item().unwrap();
    let err = (loss.item().unwrap() - want_loss).abs();
    assert!(
        err <= 1e-6,
        "loss {} vs {want_loss} (tolerance 1e-6)",
        loss.item().unwrap()
    );

    loss.backward().unwrap();
    let named = model.named_parameters();
    let grad_names: Vec<String> = f
        .names()
        .filter_map(|n| n.strip_prefix("grad.").map(String::from))
        .collect();
    assert_eq!(
        grad_names.len(),
        28,
        "every weight has a gradient in the file"
    );
    for name in &grad_names {
        let got = lucent_view(&named, name, |t| {
            t.grad().unwrap_or_else(|| Tensor::zeros(t.shape()))
        });
        let want = f.tensor(&format!("grad.{name}")).unwrap();
        assert_eq!(got.shape(), want.shape(), "{name}");
        for (i, (&g, &w)) in got.data().iter().zip(want.data()).enumerate() {
            let ok = (g - w).abs() <= 1e-6 || (g - w).abs() <= 1e-4 * w.abs();
            assert!(ok, "grad {name}[{i}]: lucent {g} vs PyTorch {w}");
        }
    }

    let meta = f.metadata();
    let adamw: serde_json::Value = serde_json::from_str(meta.get("adamw").unwrap()).unwrap();
    let lr = adamw["lr"].as_f64().unwrap() as f32;
    let betas = (
        adamw["betas"][0].as_f64().unwrap() as f32,
        adamw["betas"][1].as_f64().unwrap() as f32,
    );
    let eps = adamw["eps"].as_f64().unwrap() as f32;
    let wd = adamw["weight_decay"].as_f64().unwrap() as f32;
    // (a) lucent's AdamW from lucent's gradients, on every element whose gradient is
    // above the gradient tolerance's absolute floor (1e-6). Below it, Adam's first step
    // θ −= lr·g/(|g| + ε) depends on digits of g that neither engine computes exactly:
    // the key bias has a gradient of zero in exact arithmetic (softmax is shift-invariant
    // per row) and both engines hold rounding noise of ~1e-11 there, which the step turns
    // into ~1e-5 moves; a few weights have |g| ≈ ε = 1e-8. (b) checks the optimiser on
    // every element, from PyTorch's own gradients.
    let mut opt = AdamW::new(lr, betas, eps, wd, DecayRule::All);
    drop(loss);
    opt.step(&mut model).unwrap();
    let named = model.named_parameters();
    let mut skipped = 0;
    for name in &grad_names {
        let got = lucent_view(&named, name, |t| t.clone());
        let want = f.tensor(&format!("step1.{name}")).unwrap();
        let grad = f.tensor(&format!("grad.{name}")).unwrap();
        for (i, ((&g, &w), &gt)) in got
            .data()
            .iter()
            .zip(want.data())
            .zip(grad.data())
            .enumerate()
        {
            if gt.abs() < 1e-6 {
                skipped += 1;
                continue;
            }
            assert!(
                (g - w).abs() <= 1e-6,
                "weights after one AdamW step: {name}[{i}] {g} vs {w} (tolerance 1e-6)"
            );
        }
    }
    assert!(
        skipped < 200,
        "{skipped} elements with |grad| < 1e-6 (the 64 key biases and a few more expected)"
    );

    // (b) lucent's AdamW from PyTorch's gradients: every tensor, key bias included.
    let mut model = load(&f, "");
    model.requires_grad();
    let named = model.named_parameters();
    for name in &grad_names {
        let g = f.tensor(&format!("grad.{name}")).unwrap();
        if let Some(prefix) = name
            .strip_suffix("attn.c_attn.weight")
            .or(name.strip_suffix("attn.c_attn.bias"))
        {
            let kind = if name.ends_with("weight") {
                "weight"
            } else {
                "bias"
            };
            let i = prefix.trim_start_matches("h.").trim_end_matches('.');
            for (j, p) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
                let key = format!("decoder.layers.{i}.self_attn.{p}.{kind}");
                let t = &named.iter().find(|(k, _)| *k == key).unwrap().1;
                t.set_grad(Some(g.narrow(0, j * 32, 32).unwrap()));
            }
        } else {
            let t = lucent_view(&named, name, |t| t.clone());
            t.set_grad(Some(g));
        }
    }
    let mut opt = AdamW::new(lr, betas, eps, wd, DecayRule::All);
    opt.step(&mut model).unwrap();
    let named = model.named_parameters();
    for name in &grad_names {
        let got = lucent_view(&named, name, |t| t.clone());
        let want = f.tensor(&format!("step1.{name}")).unwrap();
        let err = got.max_abs_diff(&want).unwrap();
        assert!(
            err <= 1e-6,
            "AdamW from PyTorch's gradients: {name} differs by {err} (tolerance 1e-6)"
        );
    }
}
