//! Interventions at the trace's hook points (issue #34), held to the plain run bit for
//! bit:
//! - an empty intervention list, and patching every position of every hook point with
//!   the run's own values, give the plain (untraced) run's logits to the bit: SmolLM2
//!   (llama.cpp's arithmetic), random LLaMA-like and Gemma-like decoders and a random
//!   encoder-decoder (lucent's), and MiniLM's hidden states; Whisper tiny.en's traced
//!   logits equal its plain trace's;
//! - patching every position of `blocks.0.hook_resid_pre` (or of a middle layer's) from
//!   run B into run A gives run B's logits to the bit (same number of tokens);
//! - SmolLM2 with head H of layer L zero-ablated (`hook_z`, an edit of the traced pass)
//!   equals, to the bit, the plain untraced run of a modified copy of the weights whose
//!   `attn_output.weight` columns for head H are zero blocks: an independent computation
//!   that never touches the edit code (both add exact zeros for that head's part of the
//!   output projection's sums);
//! - mean, add, set, scale (a pattern knockout), the steering vector and generation do
//!   what they say, checked against the plain trace's numbers by hand;
//! - bad interventions are errors naming the field.
//!
//! SmolLM2, MiniLM and Whisper tiny.en come from the cache (`lucent::open`, fetching if needed).
mod common;

use lucent::model::config::{ModelKind, NormPlacement, PositionKind};
use lucent::model::hooks::hook_points;
use lucent::model::{DecoderModel, EncoderDecoderModel};
use lucent::nn::{Edit, Linear, Trace, Weight};
use lucent::ops::quant::QMatrix;
use lucent::ops::Activation;
use lucent::tensor::quant::GgmlType;
use lucent::{Intervention, InterventionOp, InterventionValue, ModelConfig, Tensor};
use rand::rngs::StdRng;
use rand::SeedableRng;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Equal to the bit (NaN-free logits).
fn assert_bits(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let diff = got
        .data()
        .iter()
        .zip(want.data())
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    let max = got.max_abs_diff(want).unwrap_or(f32::NAN);
    assert_eq!(
        diff, 0,
        "{what}: {diff} numbers differ (max |diff| {max:e})"
    );
}

/// Changed by more than `min` somewhere: the intervention did something.
fn assert_changed_by(what: &str, got: &Tensor, want: &Tensor, min: f32) {
    let max = got.max_abs_diff(want).unwrap_or(0.0);
    assert!(max > min, "{what}: changed by only {max:e}");
}

/// Changed by more than 1e-3 of a logit somewhere (a real model).
fn assert_changed(what: &str, got: &Tensor, want: &Tensor) {
    assert_changed_by(what, got, want, 1e-3);
}

/// Edits that patch every hook point of `cfg` at every position with what `recorded`
/// holds there.
fn patch_everything(cfg: &ModelConfig, recorded: &Trace) -> Vec<Edit> {
    hook_points(cfg)
        .iter()
        .map(|p| {
            let source = recorded
                .get(&p.trace_name)
                .unwrap_or_else(|| panic!("the plain trace has no {}", p.trace_name))
                .clone();
            Intervention::patch(p.name.as_str(), "")
                .to_edit(p, Some(source))
                .expect("edit")
        })
        .collect()
}

/// Every TransformerLens name of a SmolLM2 hook point, patched from `from`.
fn patch_all_names(model: &lucent::Model, from: &str) -> Vec<Intervention> {
    model
        .hook_names()
        .into_iter()
        .map(|n| Intervention::patch(n, from))
        .collect()
}

const A: &str = "The capital of France is";
const B: &str = "The capital of Spain is";

#[test]
fn smollm2_empty_and_self_patched_runs_equal_the_plain_run_bit_for_bit() -> TestResult {
    let model = lucent::open("smollm2")?;
    let tm = model.text_model()?;
    let ids = tm.encode(A)?;
    let plain = tm.model.forward(&ids, None, false, None)?; // (t, V)

    let none = model.intervene(&[])?;
    assert_bits("no interventions", &none.logits(A)?, &plain);
    let traced = model.trace(A)?;
    assert_bits(
        "Model::trace's logits",
        traced.get("logits").expect("logits"),
        &plain,
    );

    let ivs = patch_all_names(&model, A);
    assert_eq!(ivs.len(), model.hook_names().len());
    // hook_embed, 12 points per block, ln_final.
    assert_eq!(ivs.len(), 2 + 30 * 12);
    let view = model.intervene(&ivs)?;
    assert_eq!(view.edits().len(), ivs.len());
    assert_bits(
        "every hook patched with its own values",
        &view.logits(A)?,
        &plain,
    );
    // The pattern edit path: scaling every pattern by 1 leaves every bit.
    let ones: Vec<Intervention> = (0..tm.model.config.decoder_layers)
        .map(|l| Intervention::scale(format!("blocks.{l}.attn.hook_pattern"), 1.0))
        .collect();
    assert_bits(
        "patterns scaled by 1",
        &model.intervene(&ones)?.logits(A)?,
        &plain,
    );
    Ok(())
}

#[test]
fn smollm2_patching_the_residual_stream_from_b_gives_b() -> TestResult {
    let model = lucent::open("smollm2")?;
    let tm = model.text_model()?;
    let (ia, ib) = (tm.encode(A)?, tm.encode(B)?);
    assert_eq!(ia.len(), ib.len(), "the two prompts have as many tokens");
    let plain_b = tm.model.forward(&ib, None, false, None)?;
    let plain_a = tm.model.forward(&ia, None, false, None)?;
    for hook in ["blocks.0.hook_resid_pre", "blocks.12.hook_resid_pre"] {
        let view = model.intervene(&[Intervention::patch(hook, B)])?;
        assert_bits(
            &format!("{hook} patched from B"),
            &view.logits(A)?,
            &plain_b,
        );
    }
    let every = model.intervene(&patch_all_names(&model, B))?;
    assert_bits("every hook patched from B", &every.logits(A)?, &plain_b);
    // One position only: a real change, and not B's run.
    let last = ia.len() - 1;
    let one = model
        .intervene(&[Intervention::patch("blocks.12.hook_resid_pre", B).positions(vec![last])])?;
    let got = one.logits(A)?;
    assert_changed("the last position patched", &got, &plain_a);
    assert_changed("the last position patched (vs B)", &got, &plain_b);
    // Positions before the patched one are untouched (causal attention).
    let v = plain_a.shape()[1];
    assert_eq!(&got.data()[..last * v], &plain_a.data()[..last * v]);
    Ok(())
}

/// `w` (d, h·d_k) with the columns of head `head` as zero blocks (a 32-number block
/// format whose all-zero bytes decode to zeros).
fn zero_head_columns(w: &Weight, head: usize, d_k: usize) -> Weight {
    let Weight::Quant { matrix, shape } = w else {
        panic!("SmolLM2's attn_output.weight is quantised");
    };
    let dtype = matrix.dtype();
    assert!(
        matches!(
            dtype,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0
        ),
        "a 32-number block format with zero bytes meaning 0, got {dtype}"
    );
    let (rows, cols) = (matrix.rows(), matrix.cols());
    let (block, bytes) = (dtype.block_len(), dtype.block_bytes());
    assert!(d_k.is_multiple_of(block) && head * d_k + d_k <= cols);
    let row_bytes = bytes * cols / block;
    let mut raw = matrix.bytes().to_vec();
    for r in 0..rows {
        let from = r * row_bytes + head * d_k / block * bytes;
        raw[from..from + d_k / block * bytes].fill(0);
    }
    let m = QMatrix::from_vec(dtype, rows, cols, raw).expect("matrix");
    assert_eq!(*shape, [rows, cols]);
    Weight::from(m)
}

#[test]
fn smollm2_zero_ablating_a_head_equals_zeroing_its_output_weights() -> TestResult {
    let model = lucent::open("smollm2")?;
    let tm = model.text_model()?;
    let ids = tm.encode("The Eiffel Tower is in")?;
    let plain = tm.model.forward(&ids, None, false, None)?;
    let d_k = tm.model.config.head_dim;
    for (layer, head) in [(0, 0), (7, 4), (29, 8)] {
        let view = model
            .intervene(&[Intervention::zero(format!("blocks.{layer}.attn.hook_z")).head(head)])?;
        let got = view.logits("The Eiffel Tower is in")?;
        let mut modified: DecoderModel = tm.model.clone();
        let o = &mut modified.decoder.layers[layer].self_attn.o_proj;
        *o = Linear::new(zero_head_columns(&o.weight, head, d_k), o.bias.clone())?;
        let want = modified.forward(&ids, None, false, None)?;
        assert_bits(&format!("head {layer}.{head} zeroed"), &got, &want);
        assert_changed(&format!("head {layer}.{head} zeroed"), &got, &plain);
    }
    Ok(())
}

#[test]
fn smollm2_ops_do_what_they_say() -> TestResult {
    let model = lucent::open("smollm2")?;
    let text = "The Eiffel Tower is in";
    let d = model.config().d_model;
    let plain = model.trace(text)?;
    let get = |t: &Trace, n: &str| t.get(n).unwrap_or_else(|| panic!("{n}")).clone();
    // Mean ablation of layer 3's MLP output: every position holds the positions' mean.
    let t = model
        .intervene(&[Intervention::mean("blocks.3.hook_mlp_out")])?
        .trace(text)?;
    let before = get(&plain, "decoder.layer.3.ffn.output");
    let after = get(&t, "decoder.layer.3.ffn.output");
    let n = before.shape()[1];
    for j in [0, d / 2, d - 1] {
        let mean = (0..n).map(|p| before.data()[p * d + j]).sum::<f32>() / n as f32;
        for p in 0..n {
            assert_eq!(after.data()[p * d + j], mean);
        }
    }
    // Add a vector at one position of the residual stream: the recorded stream is the
    // plain one plus it there, and the same elsewhere.
    let v: Vec<f32> = (0..d).map(|i| (i % 7) as f32 - 3.0).collect();
    let t = model
        .intervene(&[Intervention::add("blocks.5.hook_resid_post", v.clone()).positions(vec![2])])?
        .trace(text)?;
    let before = get(&plain, "decoder.layer.5.output");
    let after = get(&t, "decoder.layer.5.output");
    for (i, (a, b)) in after.data().iter().zip(before.data()).enumerate() {
        let want = if i / d == 2 { b + v[i % d] } else { *b };
        assert_eq!(a.to_bits(), want.to_bits(), "element {i}");
    }
    // Knock out attention to the first token in every head of layer 2: the pattern
    // there is zero, the other keys' weights as they were, and the output changes.
    let t = model
        .intervene(&[Intervention::scale("blocks.2.attn.hook_pattern", 0.0).keys(vec![0])])?
        .trace(text)?;
    let before = get(&plain, "decoder.layer.2.attn.weights");
    let after = get(&t, "decoder.layer.2.attn.weights");
    let tk = before.shape()[3];
    for (i, (a, b)) in after.data().iter().zip(before.data()).enumerate() {
        assert_eq!(*a, if i % tk == 0 { 0.0 } else { *b });
    }
    assert_changed(
        "key 0 knocked out",
        &get(&t, "logits"),
        &get(&plain, "logits"),
    );
    // An FFN unit set to a number.
    let t = model
        .intervene(&[
            Intervention::new("blocks.1.mlp.hook_post", InterventionOp::Set)
                .unit(17)
                .value(InterventionValue::Number(4.0)),
        ])?
        .trace(text)?;
    let h = get(&t, "decoder.layer.1.ffn.hidden");
    let d_ff = h.shape()[2];
    assert!((0..n).all(|p| h.data()[p * d_ff + 17] == 4.0));
    Ok(())
}

#[test]
fn smollm2_steering_and_generation_under_interventions() -> TestResult {
    let model = lucent::open("smollm2")?;
    let sampling = lucent::Sampling::greedy().max_tokens(6);
    // No interventions: the same text as the library's own generator.
    let plain = model
        .intervene(&[])?
        .generate("The capital of France is", &sampling)?;
    let want = model
        .generator()?
        .complete("The capital of France is", &sampling)?;
    assert_eq!(plain, want);
    let v = model.steering_vector(&[("I love it", "I hate it"), ("Wonderful", "Terrible")], 10)?;
    assert_eq!(v.len(), model.config().d_model);
    // By hand: the difference of the two traces' last rows.
    let last = |text: &str| -> Vec<f32> {
        let t = model.trace(text).expect("trace");
        let r = t
            .get("decoder.layer.10.output")
            .expect("resid_post 10")
            .clone();
        let [_, n, d] = r.dims().expect("dims");
        r.data()[(n - 1) * d..].to_vec()
    };
    let (a1, b1, a2, b2) = (
        last("I love it"),
        last("I hate it"),
        last("Wonderful"),
        last("Terrible"),
    );
    for i in 0..v.len() {
        let want = ((a1[i] - b1[i]) + (a2[i] - b2[i])) / 2.0;
        assert!(
            (v[i] - want).abs() <= 1e-5 * want.abs().max(1.0),
            "element {i}"
        );
    }
    let scaled: Vec<f32> = v.iter().map(|x| x * 8.0).collect();
    let steered = model
        .intervene(&[Intervention::add("blocks.10.hook_resid_post", scaled)])?
        .generate("The capital of France is", &sampling)?;
    assert_ne!(
        steered, plain,
        "an 8x steering vector changes the greedy text"
    );
    Ok(())
}

#[test]
fn smollm2_bad_interventions_are_errors_naming_the_field() -> TestResult {
    let model = lucent::open("smollm2")?;
    let err = |ivs: &[Intervention]| match model.intervene(ivs) {
        Ok(v) => v.logits(A).expect_err("an error").to_string(),
        Err(e) => e.to_string(),
    };
    let e = err(&[Intervention::zero("blocks.30.attn.hook_z")]);
    assert!(e.contains("hook: layer 30 is out of range"), "{e}");
    let e = err(&[Intervention::zero("blocks.0.attn.hook_zed")]);
    assert!(
        e.contains("hook: no hook point") && e.contains("blocks.0.attn.hook_z"),
        "{e}"
    );
    let e = err(&[Intervention::zero("blocks.0.attn.hook_z").head(9)]);
    assert!(
        e.contains("head: 9 is out of range (this point has heads 0..9)"),
        "{e}"
    );
    let e = err(&[Intervention::zero("blocks.0.attn.hook_k").head(3)]);
    assert!(
        e.contains("head: 3 is out of range (this point has heads 0..3)"),
        "{e}"
    );
    let e = err(&[Intervention::add(
        "blocks.0.hook_resid_post",
        vec![1.0; 575],
    )]);
    assert!(
        e.contains("value: a vector of 575 numbers") && e.contains("576"),
        "{e}"
    );
    let e = err(&[Intervention::new(
        "blocks.0.hook_resid_post",
        InterventionOp::Scale,
    )]);
    assert!(e.contains("value: "), "{e}");
    let e = err(&[Intervention::new(
        "blocks.0.hook_resid_post",
        InterventionOp::Patch,
    )]);
    assert!(e.contains("from: "), "{e}");
    let e = err(&[Intervention::patch(
        "blocks.0.hook_resid_pre",
        "A much longer text than the other one",
    )]);
    assert!(e.contains("from: ") && e.contains("tokens"), "{e}");
    let e = err(&[Intervention::zero("blocks.0.hook_resid_pre").positions(vec![40])]);
    assert!(e.contains("position 40 is out of range"), "{e}");
    let e = Intervention::parse_json(r#"{"hook": "hook_embed", "op": "zero", "value": "x"}"#)
        .map(|ivs| err(&ivs))
        .unwrap_or_else(|e| e.to_string());
    assert!(e.contains("value"), "{e}");
    Ok(())
}

/// A small config of `kind` (as tests/nn_invariants.rs builds them).
fn small(kind: ModelKind) -> ModelConfig {
    common::small_config(kind, PositionKind::Sinusoidal)
}

fn llama_like() -> ModelConfig {
    common::llama_like()
}

fn gemma_like() -> ModelConfig {
    let mut c = llama_like();
    c.n_kv_heads = 1;
    c.norm_placement = NormPlacement::Sandwich;
    c.activation = Activation::GeluTanh;
    c.qk_norm = true;
    c.sliding_window = Some(3);
    c.global_every = Some(3);
    c
}

#[test]
fn random_decoders_self_patched_and_b_patched() -> TestResult {
    let (a, b): (Vec<u32>, Vec<u32>) = (vec![1, 7, 3, 9, 4, 2], vec![5, 5, 8, 0, 11, 6]);
    for (name, cfg) in [
        ("gpt-like", small(ModelKind::Decoder)),
        ("llama-like", llama_like()),
        ("gemma-like", gemma_like()),
    ] {
        let model = DecoderModel::new_random(cfg.clone(), &mut StdRng::seed_from_u64(7))?;
        let plain = model.forward(&a, None, false, None)?;
        let mut rec = Trace::new();
        model.forward(&a, None, false, Some(&mut rec))?;
        let mut edited = Trace::new().with_edits(patch_everything(&cfg, &rec));
        let got = model.forward(&a, None, false, Some(&mut edited))?;
        assert_bits(
            &format!("{name}: every hook patched with its own values"),
            &got,
            &plain,
        );

        let mut rec_b = Trace::new();
        let plain_b = model.forward(&b, None, false, Some(&mut rec_b))?;
        let points = hook_points(&cfg);
        let resid = points
            .iter()
            .find(|p| p.name == "blocks.0.hook_resid_pre")
            .expect("point");
        let edit = Intervention::patch("blocks.0.hook_resid_pre", "b")
            .to_edit(resid, rec_b.get(&resid.trace_name).cloned())?;
        let mut tr = Trace::new().with_edits(vec![edit]);
        let got = model.forward(&a, None, false, Some(&mut tr))?;
        assert_bits(
            &format!("{name}: resid_pre 0 patched from b"),
            &got,
            &plain_b,
        );
        let mut tr = Trace::new().with_edits(patch_everything(&cfg, &rec_b));
        let got = model.forward(&a, None, false, Some(&mut tr))?;
        assert_bits(
            &format!("{name}: every hook patched from b"),
            &got,
            &plain_b,
        );
    }
    Ok(())
}

#[test]
fn random_encoder_decoder_self_patched_and_b_patched() -> TestResult {
    let cfg = small(ModelKind::EncoderDecoder);
    let model = EncoderDecoderModel::new_random(cfg.clone(), &mut StdRng::seed_from_u64(3))?;
    let (src, tgt) = (vec![vec![3, 4, 5, 6, 7]], vec![vec![1, 9, 2, 8]]);
    let (src_b, tgt_b) = (vec![vec![9, 9, 1, 2, 3]], vec![vec![1, 4, 4, 7]]);
    let plain = model.forward(&src, &tgt, None, None)?;
    let mut rec = Trace::new();
    model.forward(&src, &tgt, None, Some(&mut rec))?;
    let names: Vec<String> = hook_points(&cfg).into_iter().map(|p| p.name).collect();
    assert!(names
        .iter()
        .any(|n| n == "decoder.blocks.1.cross_attn.hook_pattern"));
    assert!(names
        .iter()
        .any(|n| n == "encoder.blocks.1.hook_resid_post"));
    let mut edited = Trace::new().with_edits(patch_everything(&cfg, &rec));
    let got = model.forward(&src, &tgt, None, Some(&mut edited))?;
    assert_bits(
        "encoder-decoder: every hook patched with its own values",
        &got,
        &plain,
    );
    let mut rec_b = Trace::new();
    let plain_b = model.forward(&src_b, &tgt_b, None, Some(&mut rec_b))?;
    let mut tr = Trace::new().with_edits(patch_everything(&cfg, &rec_b));
    let got = model.forward(&src, &tgt, None, Some(&mut tr))?;
    assert_bits("encoder-decoder: every hook patched from b", &got, &plain_b);
    // Zero-ablating the decoder's cross-attention changes the output.
    let zero = Intervention::zero("decoder.blocks.1.cross_attn.hook_z").head(2);
    let points = hook_points(&cfg);
    let edit = zero.to_edit(zero.check(&points)?, None)?;
    let got = model.forward(
        &src,
        &tgt,
        None,
        Some(&mut Trace::new().with_edits(vec![edit])),
    )?;
    // Random N(0, 0.02²) weights: small outputs, small changes.
    assert_changed_by("cross-attention head zeroed", &got, &plain, 1e-5);
    Ok(())
}

#[test]
fn minilm_self_patched_hidden_states_equal_the_plain_ones() -> TestResult {
    let model = lucent::open("minilm")?;
    let text = "A cat sat on the mat.";
    let e = model.embedder()?;
    let enc = e.tokenizer().encode(text, true)?;
    let plain = e.hidden_states(&[&enc], None)?;
    let view = model.intervene(&patch_all_names(&model, text))?;
    let t = view.trace(text)?;
    assert_bits(
        "minilm: every hook patched with its own values",
        t.get("encoder.output").expect("output"),
        &plain,
    );
    let t = model
        .intervene(&[Intervention::zero("blocks.3.attn.hook_z").head(5)])?
        .trace(text)?;
    assert_changed(
        "minilm: head 3.5 zeroed",
        t.get("encoder.output").expect("output"),
        &plain,
    );
    Ok(())
}

/// An intervened view embeds too: with no interventions (and with every hook patched
/// with its own values) its sentence vector is the plain pass's pooled and normalised
/// hidden states bit for bit, and a zeroed head moves it.
#[test]
fn minilm_intervened_embeddings() -> TestResult {
    let model = lucent::open("minilm")?;
    let text = "A cat sat on the mat.";
    let e = model.embedder()?;
    let enc = e.tokenizer().encode(text, true)?;
    let hidden = e.hidden_states(&[&enc], None)?; // (1, t, d)
    let mut plain = lucent::pipeline::embed::pool(&hidden, &[enc.len()], e.config().pooling)?
        .pop()
        .expect("one vector");
    lucent::pipeline::embed::l2_normalize(&mut plain);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&model.intervene(&[])?.embed(text)?),
        bits(&plain),
        "no interventions"
    );
    assert_eq!(
        bits(
            &model
                .intervene(&patch_all_names(&model, text))?
                .embed(text)?
        ),
        bits(&plain),
        "every hook patched with its own values"
    );
    let ablated = model
        .intervene(&[Intervention::zero("blocks.3.attn.hook_z").head(5)])?
        .embed(text)?;
    let cos = lucent::pipeline::embed::cosine(&ablated, &plain);
    assert!(
        cos < 0.99999,
        "head 3.5 zeroed moved the embedding by nothing (cosine {cos})"
    );
    Ok(())
}

#[test]
fn whisper_self_patched_trace_equals_the_plain_trace() -> TestResult {
    // Whisper's trace: the plain transcript, then a traced teacher-forced pass over the
    // first window, which the edits reach (encoder, decoder, cross-attention).
    let model = lucent::open("whisper-tiny.en")?;
    let wav = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/speech.wav");
    let plain = model.trace(wav)?;
    let logits = plain.get("logits").expect("logits").clone();
    let names = model.hook_names();
    assert!(names
        .iter()
        .any(|n| n == "decoder.blocks.3.cross_attn.hook_z"));
    let view = model.intervene(&patch_all_names(&model, wav))?;
    let t = view.trace(wav)?;
    assert_bits(
        "whisper: every hook patched with its own values",
        t.get("logits").expect("logits"),
        &logits,
    );
    assert_eq!(t.target_tokens(), plain.target_tokens());
    let t = model
        .intervene(&[Intervention::zero("decoder.blocks.2.cross_attn.hook_z").head(1)])?
        .trace(wav)?;
    assert_changed(
        "whisper: cross-attention head 2.1 zeroed",
        t.get("logits").expect("logits"),
        &logits,
    );
    Ok(())
}

/// Cached generation under each op (prefill with the edits, then one token at a time over
/// the KV cache, the edits at their absolute positions) equals the generation that
/// recomputes the whole sequence at every step, token for token; the prefill's logits
/// equal the recomputed pass's last row to the bit. Positions past the prompt and a
/// patch from a shorter text are included (an edit there applies from the step that
/// reaches it); mean ablation is refused by the cache and recomputed by `generate`.
///
/// Only the first step is compared to the bit: under llama.cpp's arithmetic the
/// attention's f16 summation order depends on how many query rows a pass has, so a
/// cached step (one row) and a recomputed one (all rows) may differ in their last bits
/// even with no intervention at all (SmolLM2 plain, 14 tokens: 6e-3 at layer 4's
/// attention output). Each op alone keeps the greedy tokens here; a pile-up of strong
/// edits can turn such a difference into another token at a near tie, as it would for
/// the plain model.
#[test]
fn smollm2_cached_generation_under_each_op_equals_recomputing() -> TestResult {
    let model = lucent::open("smollm2")?;
    let text = "The capital of France is";
    let n = model.tokens(text)?.len();
    let sampling = lucent::Sampling::greedy().max_tokens(8);
    let plain = model.generator()?.complete(text, &sampling)?;
    let v = model.steering_vector(&[("I love it", "I hate it"), ("Wonderful", "Terrible")], 10)?;
    let steer: Vec<f32> = v.iter().map(|x| x * 8.0).collect();
    let cases: Vec<(&str, Vec<Intervention>)> = vec![
        (
            "zero a head",
            vec![Intervention::zero("blocks.3.attn.hook_z").head(2)],
        ),
        (
            "zero a layer's MLP at a prompt and a generated position",
            vec![Intervention::zero("blocks.5.hook_mlp_out").positions(vec![1, n + 2])],
        ),
        (
            "steer the generated positions only",
            vec![
                Intervention::add("blocks.10.hook_resid_post", steer.clone())
                    .positions((n..n + 8).collect()),
            ],
        ),
        (
            "steer everywhere",
            vec![Intervention::add("blocks.10.hook_resid_post", steer)],
        ),
        (
            "set an FFN unit",
            vec![
                Intervention::new("blocks.2.mlp.hook_post", InterventionOp::Set)
                    .value(InterventionValue::Number(3.0))
                    .unit(7),
            ],
        ),
        (
            "scale the residual stream at a prompt and a generated position",
            vec![Intervention::scale("blocks.4.hook_resid_pre", 0.5).positions(vec![0, n])],
        ),
        (
            "knock out key 0 in every query of a layer",
            vec![Intervention::scale("blocks.6.attn.hook_pattern", 0.0).keys(vec![0])],
        ),
        (
            "patch K of a layer from a shorter text",
            vec![Intervention::patch(
                "blocks.1.attn.hook_k",
                "The capital of",
            )],
        ),
        (
            "patch the residual stream from a longer text",
            vec![Intervention::patch(
                "blocks.8.hook_resid_pre",
                "The capital city of Germany is not",
            )],
        ),
    ];
    let mut changed = 0;
    for (what, ivs) in &cases {
        let view = model.intervene(ivs)?;
        let cached = view.generate(text, &sampling)?;
        let recomputed = view.generate_recomputed(text, &sampling)?;
        assert_eq!(cached, recomputed, "{what}: cached vs recomputed tokens");
        changed += usize::from(cached != plain);
        let ids = model.text_model()?.encode(text)?;
        let first = view.cached(ids.len() + 1)?.feed(&ids)?;
        // The recomputed pass over the prompt: Intervened::logits_of, or, for a patch
        // source longer than the prompt (logits_of wants texts of equal length), the
        // forward with the edits cut to the prompt, as generate_recomputed's first step.
        let want = match view.logits_of(&ids) {
            Ok(l) => l,
            Err(_) => {
                let edits = lucent::edits_for_positions(view.edits(), 0, n)?;
                let mut trace = Trace::only(&[]).with_edits(edits);
                model
                    .text_model()?
                    .model
                    .forward(&ids, None, false, Some(&mut trace))?
            }
        };
        let v = want.shape()[1];
        let want = Tensor::new(want.data()[(n - 1) * v..].to_vec(), &[v])?;
        let got = Tensor::new(first, &[v])?;
        assert_bits(&format!("{what}: first step"), &got, &want);
    }
    assert!(
        changed >= 4,
        "only {changed} of the ops changed the greedy text"
    );
    // Mean: the cache refuses it, naming the point; generate recomputes.
    let mean = model.intervene(&[Intervention::mean("blocks.3.attn.hook_z").head(1)])?;
    let err = mean
        .cached(16)
        .err()
        .expect("a cached mean ablation is refused")
        .to_string();
    assert!(
        err.contains("decoder.layer.3.attn.context") && err.contains("mean"),
        "{err}"
    );
    assert_eq!(
        mean.generate(text, &sampling)?,
        mean.generate_recomputed(text, &sampling)?
    );
    Ok(())
}
