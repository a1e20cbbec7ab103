//! Properties every inference path must keep, on seeded random models:
//! cached decoding equals the full causal forward (1e-5); padding never changes the rows
//! it does not touch (1e-5); a batch of N equals N batches of one (1e-5); bad input gives
//! errors that name the shapes, not panics.
mod common;

use lucent::model::build;
use lucent::model::config::{FfnKind, ModelKind, NormKind, NormPlacement, PositionKind};
use lucent::nn::{
    AttentionConfig, AttentionOptions, Decoder, Dropout, Embedding, FeedForward, Head, KvCache,
    Linear, MultiHeadAttention, Norm, RmsNorm, Trace,
};
use lucent::ops::{Activation, RopeConvention, RopeScaling};
use lucent::{ModelConfig, Tensor};
use rand::rngs::StdRng;
use rand::SeedableRng;

fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f32) {
    let d = got
        .max_abs_diff(want)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(d <= tol, "{what}: max |diff| {d:e} > {tol:e}");
}

/// A small config; `kind` and the family's choices are set by each test.
fn config(kind: ModelKind) -> ModelConfig {
    common::small_config(kind, PositionKind::None)
}

/// LLaMA-like: pre-norm RMSNorm, SwiGLU, GQA, RoPE rotate-half, no biases, final norm.
fn llama_like() -> ModelConfig {
    common::llama_like()
}

/// Gemma-3-like: sandwich norms, GeGLU, multi-query, QK-norm, local/global layers with
/// their own RoPE bases and a sliding window.
fn gemma_like() -> ModelConfig {
    let mut c = llama_like();
    c.n_kv_heads = 1;
    c.norm_placement = NormPlacement::Sandwich;
    c.activation = Activation::GeluTanh;
    c.qk_norm = true;
    c.position = PositionKind::Rope {
        base: 1_000_000.0,
        local_base: Some(10_000.0),
        convention: RopeConvention::RotateHalf,
        scaling: RopeScaling::None,
        freq_factors: false,
    };
    c.sliding_window = Some(3);
    c.global_every = Some(3);
    c
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, 1.0, &mut StdRng::seed_from_u64(seed))
}

/// Random weights are N(0, 0.02²): attention over such tiny queries and keys is nearly
/// uniform. Scale the projections up so that the scores (and so the mask) matter.
fn sharpen(dec: &mut Decoder) {
    for l in &mut dec.layers {
        for lin in [
            &mut l.self_attn.q_proj,
            &mut l.self_attn.k_proj,
            &mut l.self_attn.v_proj,
            &mut l.self_attn.o_proj,
        ] {
            lin.weight = lin.weight_f32().unwrap().scale(10.0).into();
        }
    }
}

fn check_cached_equals_full(cfg: &ModelConfig, chunks: &[usize]) {
    let mut rng = StdRng::seed_from_u64(1);
    let mut dec = build::random_decoder(cfg, &mut rng).unwrap();
    sharpen(&mut dec);
    let total: usize = chunks.iter().sum();
    let x = randn(&[2, total, cfg.d_model], 2);
    // An encoder-decoder's decoder also reads a memory (the same at every step).
    let memory = (cfg.kind == ModelKind::EncoderDecoder).then(|| randn(&[2, 4, cfg.d_model], 3));
    let memory = memory.as_ref();
    let none = AttentionOptions::none();
    let full = dec.forward(&x, memory, &none, None, None, None).unwrap();
    // The test can fail: seeing one position less changes the output visibly.
    let later = x.narrow(1, 1, total - 1).unwrap();
    let shorter = dec
        .forward(&later, memory, &none, None, None, None)
        .unwrap();
    let shift = shorter
        .max_abs_diff(&full.narrow(1, 1, total - 1).unwrap())
        .unwrap();
    assert!(
        shift > 1e-2,
        "{}: attention barely matters ({shift})",
        cfg.family
    );
    let mut cache = dec.new_cache(2, total + 1);
    let mut start = 0;
    for &n in chunks {
        let step = x.narrow(1, start, n).unwrap(); // (b, n, d)
        let got = dec
            .forward(&step, memory, &none, None, Some(&mut cache), None)
            .unwrap();
        let want = full.narrow(1, start, n).unwrap();
        let what = format!("{} positions {start}..{}", cfg.family, start + n);
        assert_close(&what, &got, &want, 1e-5);
        start += n;
        assert_eq!(cache.len(), start);
    }
}

#[test]
fn cached_decoding_equals_full_causal_forward() {
    let mut c = llama_like();
    c.family = "llama-like".into();
    check_cached_equals_full(&c, &[1; 9]);
    check_cached_equals_full(&c, &[4, 1, 1, 3]);
    let mut g = gemma_like();
    g.family = "gemma-like".into();
    check_cached_equals_full(&g, &[1; 9]);
    check_cached_equals_full(&g, &[5, 1, 2, 1]);
    let mut p = config(ModelKind::Decoder);
    p.family = "post-norm mha".into();
    check_cached_equals_full(&p, &[2, 1, 1]);
    let mut ed = config(ModelKind::EncoderDecoder);
    ed.family = "encoder-decoder".into();
    check_cached_equals_full(&ed, &[1, 1, 2, 1]);
}

#[test]
fn full_cache_and_wrong_cache_are_errors() {
    let cfg = llama_like();
    let dec = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(1)).unwrap();
    let mut cache = dec.new_cache(1, 4);
    let x = randn(&[1, 3, cfg.d_model], 3);
    dec.forward(
        &x,
        None,
        &AttentionOptions::none(),
        None,
        Some(&mut cache),
        None,
    )
    .unwrap();
    let e = dec
        .forward(
            &x,
            None,
            &AttentionOptions::none(),
            None,
            Some(&mut cache),
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("capacity 4"), "{e}");
    assert_eq!(cache.len(), 3, "a failed step leaves the cache as it was");
    let mut small = KvCache::new(1, 1, 2, 8, 6);
    let e = dec
        .forward(
            &x,
            None,
            &AttentionOptions::none(),
            None,
            Some(&mut small),
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 layers") && e.contains("3"), "{e}");
}

/// Sequence 0 has 4 real tokens; as a batch with sequence 1 of length 6 it is padded
/// with 2 junk positions masked out by a bias. Its 4 real rows must not change.
#[test]
fn padding_never_changes_real_rows() {
    for placement in [
        NormPlacement::Post,
        NormPlacement::Pre,
        NormPlacement::Sandwich,
    ] {
        let mut cfg = config(ModelKind::Encoder);
        cfg.norm_placement = placement;
        cfg.final_norm = placement != NormPlacement::Post;
        let mut enc = build::random_encoder(&cfg, &mut StdRng::seed_from_u64(5)).unwrap();
        for l in &mut enc.layers {
            l.self_attn.q_proj.weight = l.self_attn.q_proj.weight_f32().unwrap().scale(10.0).into();
            l.self_attn.k_proj.weight = l.self_attn.k_proj.weight_f32().unwrap().scale(10.0).into();
        }
        let d = cfg.d_model;
        let alone = randn(&[1, 4, d], 6);
        let other = randn(&[1, 6, d], 7);
        let junk = randn(&[1, 2, d], 8).scale(50.0);
        let padded = Tensor::cat(&[&alone, &junk], 1).unwrap(); // (1, 6, d)
        let batch = Tensor::cat(&[&padded, &other], 0).unwrap(); // (2, 6, d)
        let bias = Tensor::from_fn(&[2, 1, 6, 6], |i| {
            let (bi, j) = (i / 36, i % 6);
            if bi == 0 && j >= 4 {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        });
        let out = enc
            .forward(&batch, &AttentionOptions::none().with_bias(&bias), None)
            .unwrap();
        let want = enc
            .forward(&alone, &AttentionOptions::none(), None)
            .unwrap();
        let got = out.narrow(0, 0, 1).unwrap().narrow(1, 0, 4).unwrap();
        assert_close(&format!("{placement:?} padded rows"), &got, &want, 1e-5);
        let want1 = enc
            .forward(&other, &AttentionOptions::none(), None)
            .unwrap();
        assert_close(
            &format!("{placement:?} unpadded neighbour"),
            &out.narrow(0, 1, 1).unwrap(),
            &want1,
            1e-5,
        );
    }
    // A causal decoder needs no bias: later positions never reach earlier rows.
    let cfg = gemma_like();
    let mut dec = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(9)).unwrap();
    sharpen(&mut dec);
    let x = randn(&[1, 7, cfg.d_model], 10);
    let long = Tensor::cat(&[&x, &randn(&[1, 3, cfg.d_model], 11)], 1).unwrap();
    let a = dec
        .forward(&x, None, &AttentionOptions::none(), None, None, None)
        .unwrap();
    let b = dec
        .forward(&long, None, &AttentionOptions::none(), None, None, None)
        .unwrap();
    assert_close(
        "causal right padding",
        &b.narrow(1, 0, 7).unwrap(),
        &a,
        1e-5,
    );
}

#[test]
fn batch_of_n_equals_n_batches_of_one() {
    let mut cfg = config(ModelKind::EncoderDecoder);
    cfg.final_norm = true;
    let model = build::random_transformer(&cfg, &mut StdRng::seed_from_u64(12)).unwrap();
    let (src, tgt) = (
        randn(&[3, 5, cfg.d_model], 13),
        randn(&[3, 4, cfg.d_model], 14),
    );
    let none = AttentionOptions::none();
    let all = model.forward(&src, &tgt, &none, &none, None, None).unwrap();
    for i in 0..3 {
        let one = model
            .forward(
                &src.narrow(0, i, 1).unwrap(),
                &tgt.narrow(0, i, 1).unwrap(),
                &none,
                &none,
                None,
                None,
            )
            .unwrap();
        assert_close(
            &format!("sequence {i}"),
            &all.narrow(0, i, 1).unwrap(),
            &one,
            1e-5,
        );
    }
    let cfg = gemma_like();
    let dec = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(15)).unwrap();
    let x = randn(&[4, 6, cfg.d_model], 16);
    let all = dec.forward(&x, None, &none, None, None, None).unwrap();
    for i in 0..4 {
        let one = dec
            .forward(&x.narrow(0, i, 1).unwrap(), None, &none, None, None, None)
            .unwrap();
        assert_close(
            &format!("gemma-like sequence {i}"),
            &all.narrow(0, i, 1).unwrap(),
            &one,
            1e-5,
        );
    }
}

#[test]
fn bad_input_gives_errors_naming_shapes() {
    let cfg = AttentionConfig::new(16, 4).unwrap();
    let mha = MultiHeadAttention::new_random(&cfg, 0.02, &mut StdRng::seed_from_u64(0)).unwrap();
    // Wrong width.
    let e = mha
        .forward_self(&Tensor::zeros(&[2, 5, 12]), &AttentionOptions::none(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[2, 5, 12]") && e.contains("16"), "{e}");
    // Wrong rank.
    assert!(mha
        .forward_self(&Tensor::zeros(&[5, 16]), &AttentionOptions::none(), None)
        .is_err());
    // Cross-attention batch mismatch names both shapes.
    let e = mha
        .forward(
            &Tensor::zeros(&[2, 5, 16]),
            Some(&Tensor::zeros(&[3, 7, 16])),
            &AttentionOptions::none(),
            None,
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("[2, 5, 16]") && e.contains("[3, 7, 16]"), "{e}");
    // Mask of the wrong size.
    let bias = Tensor::zeros(&[5, 4]);
    let e = mha
        .forward_self(
            &Tensor::zeros(&[2, 5, 16]),
            &AttentionOptions::none().with_bias(&bias),
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("[5, 4]") && e.contains("[2, 4, 5, 5]"), "{e}");
    // d_model not divisible by heads; heads not divisible by kv_heads.
    let e = AttentionConfig::new(18, 4).unwrap_err().to_string();
    assert!(e.contains("d_model (18)") && e.contains("heads (4)"), "{e}");
    let e = AttentionConfig::new(16, 4)
        .unwrap()
        .with_kv_heads(3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("heads (4)") && e.contains("kv_heads (3)"), "{e}");
    let e = MultiHeadAttention::from_in_proj(
        3,
        &Tensor::zeros(&[48, 16]),
        None,
        Tensor::zeros(&[16, 16]),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("d_model (16)"), "{e}");
    // A projection of the wrong shape names it.
    let lin = |o, i| Linear::new(Tensor::zeros(&[o, i]), None).unwrap();
    let e = MultiHeadAttention::new(
        cfg.clone(),
        lin(16, 16),
        lin(8, 16),
        lin(16, 16),
        lin(16, 16),
        None,
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("k_proj") && e.contains("[8, 16]") && e.contains("[16, 16]"),
        "{e}"
    );
    // FFN widths that do not chain.
    let e = FeedForward::mlp(lin(32, 16), lin(16, 30), Activation::Relu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[32, 16]") && e.contains("[16, 30]"), "{e}");
    // Embedding: the bad id and where it is.
    let emb = Embedding::new_random(10, 4, 0.02, 1.0, &mut StdRng::seed_from_u64(0));
    let e = emb
        .forward(&[vec![1, 2], vec![3, 12]])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("token id 12") && e.contains("sequence 1, position 1") && e.contains("10 rows"),
        "{e}"
    );
    assert!(emb.forward(&[vec![1, 2], vec![3]]).is_err(), "ragged batch");
    // An encoder-decoder's decoder without memory, a decoder-only one given memory.
    let cfg = config(ModelKind::EncoderDecoder);
    let dec = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(0)).unwrap();
    let x = Tensor::zeros(&[1, 2, cfg.d_model]);
    let e = dec
        .forward(&x, None, &AttentionOptions::none(), None, None, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("memory"), "{e}");
    let dec = build::random_decoder(&llama_like(), &mut StdRng::seed_from_u64(0)).unwrap();
    assert!(dec
        .forward(&x, Some(&x), &AttentionOptions::none(), None, None, None)
        .is_err());
    // A Transformer needs an encoder-decoder config.
    assert!(build::random_transformer(&llama_like(), &mut StdRng::seed_from_u64(0)).is_err());
}

#[test]
fn random_init_is_seeded_and_scaled_like_gpt2() {
    let cfg = llama_like();
    let a = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(3)).unwrap();
    let b = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(3)).unwrap();
    let c = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(4)).unwrap();
    let w = |d: &Decoder| d.layers[1].self_attn.q_proj.weight_f32().unwrap().clone();
    assert_eq!(w(&a).data(), w(&b).data());
    assert_ne!(w(&a).data(), w(&c).data());
    let std = |t: &Tensor| (t.data().iter().map(|x| x * x).sum::<f32>() / t.numel() as f32).sqrt();
    // Many samples: a big layer makes the estimate tight.
    let mut big = llama_like();
    (
        big.d_model,
        big.n_heads,
        big.n_kv_heads,
        big.head_dim,
        big.d_ff,
    ) = (256, 4, 2, 64, 512);
    let dec = build::random_decoder(&big, &mut StdRng::seed_from_u64(5)).unwrap();
    let l = &dec.layers[0];
    let q = std(l.self_attn.q_proj.weight_f32().unwrap());
    assert!((q - 0.02).abs() < 0.001, "q_proj std {q}");
    let o = std(l.self_attn.o_proj.weight_f32().unwrap());
    let want = 0.02 / (2.0 * 3.0f32).sqrt();
    assert!((o - want).abs() < 0.001, "o_proj std {o}, want {want}");
    match &l.ffn {
        FeedForward::Gated { down, .. } => {
            let s = std(down.weight_f32().unwrap());
            assert!((s - want).abs() < 0.001, "down std {s}");
        }
        other => panic!("expected a gated FFN, got {:?}", other.kind()),
    }
}

/// The sandwich layer computes x + post(f(pre(x))) per sub-layer, from its own parts.
#[test]
fn sandwich_layer_is_its_formula() {
    let mut cfg = config(ModelKind::Encoder);
    cfg.norm_placement = NormPlacement::Sandwich;
    cfg.norm = NormKind::RmsNorm;
    let mut layer = build::random_encoder_layer(&cfg, 0, &mut StdRng::seed_from_u64(0)).unwrap();
    // Non-trivial norm weights so that a swapped norm would show.
    let mut rng = StdRng::seed_from_u64(1);
    let mut gamma = || Norm::Rms(RmsNorm::new(Tensor::randn(&[24], 1.0, &mut rng), 1e-5).unwrap());
    layer.self_attn_norm = gamma();
    layer.self_attn_post_norm = Some(gamma());
    layer.ffn_norm = gamma();
    layer.ffn_post_norm = Some(gamma());
    let x = randn(&[2, 3, 24], 2);
    let got = layer.forward(&x, &AttentionOptions::none(), None).unwrap();
    let none = AttentionOptions::none();
    let post1 = layer.self_attn_post_norm.as_ref().unwrap();
    let a = layer
        .self_attn
        .forward_self(&layer.self_attn_norm.forward(&x).unwrap(), &none, None)
        .unwrap()
        .output;
    let h = x.add(&post1.forward(&a).unwrap()).unwrap();
    let f = layer
        .ffn
        .forward(
            &layer.ffn_norm.forward(&h).unwrap(),
            lucent::Numerics::Lucent,
            None,
        )
        .unwrap();
    let want = h
        .add(&layer.ffn_post_norm.as_ref().unwrap().forward(&f).unwrap())
        .unwrap();
    assert_close("sandwich", &got, &want, 1e-6);
    layer.ffn_post_norm = None;
    assert!(
        layer.forward(&x, &none, None).is_err(),
        "sandwich without its post-norm"
    );
}

/// SwiGLU and GeGLU against the formula written out one number at a time.
#[test]
fn gated_ffn_is_its_formula() {
    for act in [Activation::Silu, Activation::GeluTanh] {
        let mut rng = StdRng::seed_from_u64(2);
        let ffn = FeedForward::new_random(FfnKind::Gated, act, 5, 7, true, 0.3, &mut rng);
        let FeedForward::Gated { gate, up, down, .. } = &ffn else {
            unreachable!()
        };
        let gate = FeedForward::Gated {
            gate: Linear::new(
                gate.weight_f32().unwrap().scale(15.0),
                Some(Tensor::full(&[7], 0.1)),
            )
            .unwrap(),
            up: up.clone(),
            down: down.clone(),
            activation: act,
        };
        let x = randn(&[3, 5], 3);
        let got = gate.forward(&x, lucent::Numerics::Lucent, None).unwrap();
        let FeedForward::Gated {
            gate: g,
            up: u,
            down: dn,
            ..
        } = &gate
        else {
            unreachable!()
        };
        let dot = |w: &Linear, row: &[f32], o: usize| -> f32 {
            let wr = &w.weight_f32().unwrap().data()[o * row.len()..(o + 1) * row.len()];
            wr.iter().zip(row).map(|(a, b)| a * b).sum::<f32>()
                + w.bias.as_ref().map_or(0.0, |b| b.data()[o])
        };
        for r in 0..3 {
            let xr = &x.data()[r * 5..(r + 1) * 5];
            let hidden: Vec<f32> = (0..7)
                .map(|j| act.scalar(dot(g, xr, j)) * dot(u, xr, j))
                .collect();
            for o in 0..5 {
                let want = dot(dn, &hidden, o);
                let have = got.data()[r * 5 + o];
                assert!(
                    (have - want).abs() < 1e-5,
                    "{act:?} row {r} out {o}: {have} vs {want}"
                );
            }
        }
    }
}

#[test]
fn qk_norm_normalises_each_head_and_trace_names_everything() {
    let mut cfg = gemma_like();
    cfg.norm_eps = 1e-9; // so that the QK-norm's output has mean square 1 to 1e-3
    let dec = build::random_decoder(&cfg, &mut StdRng::seed_from_u64(0)).unwrap();
    let x = randn(&[2, 5, cfg.d_model], 1);
    let mut trace = Trace::new();
    let traced = dec
        .forward(
            &x,
            None,
            &AttentionOptions::none(),
            None,
            None,
            Some(&mut trace),
        )
        .unwrap();
    let plain = dec
        .forward(&x, None, &AttentionOptions::none(), None, None, None)
        .unwrap();
    assert_eq!(
        traced.data(),
        plain.data(),
        "tracing does not change the result"
    );
    for leaf in [
        "q", "k", "v", "scores", "scaled", "mask", "weights", "context", "output",
    ] {
        assert!(
            trace.get(&format!("decoder.layer.2.attn.{leaf}")).is_some(),
            "missing {leaf}"
        );
    }
    assert!(trace.get("decoder.layer.0.ffn.hidden").is_some());
    assert!(trace.get("decoder.layer.0.output").is_some());
    assert!(trace.get("decoder.output").is_some());
    // γ = 1 QK-norm, then RoPE (a rotation): every head's row has mean square ≈ 1.
    let q = trace.get("decoder.layer.0.attn.q").unwrap();
    assert_eq!(q.shape(), [2, 4, 5, 6]);
    for row in q.data().chunks(6) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / 6.0;
        assert!((ms - 1.0).abs() < 1e-3, "mean square {ms}");
    }
    // Layer 0 is local (window 3): the mask hides keys more than 2 positions back.
    let mask = trace.get("decoder.layer.0.attn.mask").unwrap();
    let row4 = &mask.data()[4 * 5..5 * 5];
    assert!(
        row4[0].is_infinite() && row4[1].is_infinite() && row4[2] == 0.0 && row4[4] == 0.0,
        "{row4:?}"
    );
    // Layer 2 is global: causal only.
    let g = trace.get("decoder.layer.2.attn.mask").unwrap();
    assert!(g.data()[4 * 5..5 * 5].iter().all(|&v| v == 0.0));
}

#[test]
fn embedding_head_and_dropout() {
    let mut rng = StdRng::seed_from_u64(0);
    let emb = Embedding::new_random(10, 4, 1.0, 2.0, &mut rng);
    let x = emb.forward(&[vec![3, 0], vec![9, 3]]).unwrap();
    assert_eq!(x.shape(), [2, 2, 4]);
    assert_eq!(
        &x.data()[0..4],
        &emb.table
            .as_f32()
            .unwrap()
            .row(3)
            .iter()
            .map(|v| v * 2.0)
            .collect::<Vec<_>>()[..]
    );
    assert_eq!(&x.data()[12..16], &x.data()[0..4]);
    let head = Head::tied_to(&emb.table).unwrap();
    let logits = head.logits(&x).unwrap();
    assert_eq!(logits.shape(), [2, 2, 10]);
    let cold = head.probabilities(&x, 0.5).unwrap();
    let hot = head.probabilities(&x, 2.0).unwrap();
    for (c, h) in cold.data().chunks(10).zip(hot.data().chunks(10)) {
        assert!((c.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        let (cm, hm) = (
            c.iter().cloned().fold(0.0, f32::max),
            h.iter().cloned().fold(0.0, f32::max),
        );
        assert!(cm > hm, "lower temperature sharpens: {cm} vs {hm}");
    }
    assert!(head.probabilities(&x, 0.0).is_err());
    let mut drop = Dropout::new(0.5, 1).unwrap();
    let y = drop.forward(&x).unwrap();
    assert_ne!(
        y.data(),
        x.data(),
        "training-mode dropout changes its input"
    );
    drop.eval();
    assert_eq!(drop.forward(&x).unwrap().data(), x.data());
}

#[test]
fn cross_attention_shapes() {
    let cfg = AttentionConfig::new(16, 4)
        .unwrap()
        .with_kv_heads(2)
        .unwrap();
    let mha = MultiHeadAttention::new_random(&cfg, 0.02, &mut StdRng::seed_from_u64(0)).unwrap();
    let r = mha
        .forward(
            &randn(&[2, 3, 16], 1),
            Some(&randn(&[2, 7, 16], 2)),
            &AttentionOptions::none().with_weights(),
            None,
            None,
        )
        .unwrap();
    assert_eq!(r.output.shape(), [2, 3, 16]);
    let w = r.weights.unwrap();
    assert_eq!(w.shape(), [2, 4, 3, 7]);
    for row in w.data().chunks(7) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}
