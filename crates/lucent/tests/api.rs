//! The public API (`lucent::open`, `Model`, `Generator`, `Embedder`, `Trace`) as a user
//! meets it: the shipped examples run; every kind of model opens by name or path and
//! says what it is; streaming, completing and the full generation loop give the same
//! text; a trained GPT generates with top-p / min-p and streaming through the same loop
//! as SmolLM2; a trained encoder-decoder shows its cross-attention through the same
//! trace as a real model; checkpoints that ask for arithmetic lucent does not do, or
//! hold tensors the model would not use, are refused with the key named.

use std::path::{Path, PathBuf};
use std::process::Command;

use lucent::io::fetch::Silent;
use lucent::train::data::Task;
use lucent::train::{train, Job, Limits, Quiet, TrainConfig};
use lucent::{Embedder, Generator, Message, ModelKind, Sampling};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lucent-api-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A built example binary (cargo builds the examples before running the tests).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap(); // target/release/deps/api-…
    let dir = exe.parent().and_then(Path::parent).unwrap(); // target/release
    let path = dir.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is not built; cargo test builds the examples",
        path.display()
    );
    path
}

#[test]
fn the_examples_run() {
    let out = Command::new(example("generate")).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("The capital of France is Paris"), "{text}");

    let out = Command::new(example("embed")).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let cos: Vec<f32> = text
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(cos.len(), 3, "{text}");
    assert!((cos[0] - 1.0).abs() < 1e-4, "{text}");
    assert!(
        cos[1] > cos[2] + 0.2,
        "the kitten is nearer than the stocks: {text}"
    );
}

#[test]
fn models_open_by_name_and_know_their_kind() {
    let minilm = lucent::open("minilm").unwrap();
    assert_eq!(minilm.kind(), ModelKind::Encoder);
    let e = minilm.generator().unwrap_err().to_string();
    assert!(e.contains("encoder") && e.contains("embed"), "{e}");
    let toks = minilm.tokens("The cat sat").unwrap();
    assert_eq!(toks.first().map(|t| t.piece.as_str()), Some("[CLS]"));
    assert!(toks[0].special && !toks[1].special);

    let smol = lucent::open("smollm2").unwrap();
    assert_eq!(smol.kind(), ModelKind::Decoder);
    assert_eq!(smol.config().family, "llama");
    let e = smol.embedder().unwrap_err().to_string();
    assert!(e.contains("encoder"), "{e}");

    let e = lucent::open("no-such-model").unwrap_err().to_string();
    assert!(e.contains("no-such-model") && e.contains("smollm2"), "{e}");
    let e = lucent::open(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/api.rs"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a GGUF file"), "{e}");

    // The same model by path.
    let by_path = lucent::open(smol.path().to_str().unwrap()).unwrap();
    assert_eq!(by_path.kind(), ModelKind::Decoder);
}

#[test]
fn stream_complete_and_generate_agree() {
    let model = lucent::open("smollm2").unwrap();
    let mut gen = model.generator().unwrap();
    let s = Sampling::greedy().max_tokens(12);
    let streamed: String = gen
        .stream("Once upon a time", &s)
        .unwrap()
        .collect::<lucent::Result<Vec<String>>>()
        .unwrap()
        .concat();
    let completed = gen.complete("Once upon a time", &s).unwrap();
    let ids = gen.encode("Once upon a time").unwrap();
    let mut pieces = String::new();
    let g = gen.generate(&ids, &s, &mut |p| pieces.push_str(p)).unwrap();
    assert_eq!(streamed, completed);
    assert_eq!(completed, g.text);
    assert_eq!(pieces, g.text);
    assert_eq!(g.ids.len(), 12);

    // Chat: the reply through the template, streamed or not, is the same.
    let msgs = [Message::new("user", "What is 2 + 2?")];
    let s = Sampling::greedy().max_tokens(24);
    let reply = gen.chat(&msgs, &s).unwrap();
    let streamed: String = gen
        .stream_chat(&msgs, &s)
        .unwrap()
        .map(|p| p.unwrap())
        .collect();
    assert_eq!(reply, streamed);
    assert!(reply.contains('4'), "{reply}");

    // Log-probabilities: the greedy token is the most likely one, and they are ≤ 0.
    let lp = Sampling {
        logprobs: Some(3),
        ..Sampling::greedy().max_tokens(4)
    };
    let g = gen.generate(&ids, &lp, &mut |_| {}).unwrap();
    assert_eq!(g.logprobs.len(), 4);
    for (t, l) in g.ids.iter().zip(&g.logprobs) {
        assert_eq!((l.id, l.top[0].0), (*t, *t));
        assert!(l.logprob <= 0.0 && (l.logprob - l.top[0].1).abs() < 1e-6);
        assert!(l.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}

#[test]
fn a_decoder_trace_holds_every_layer_and_head() {
    let model = lucent::open("smollm2").unwrap();
    let trace = model.trace("The cat sat").unwrap();
    let t = trace.tokens().len();
    assert_eq!(t, model.tokens("The cat sat").unwrap().len());
    let cfg = model.config();
    for l in [0, cfg.decoder_layers - 1] {
        let w = trace
            .get(&format!("decoder.layer.{l}.attn.weights"))
            .unwrap();
        assert_eq!(w.shape(), [1, cfg.n_heads, t, t]);
        // Causal: row i sums to 1 over keys 0..=i and gives nothing to later keys (the
        // weights are rounded to f16, as llama.cpp's attention reads them: each of up
        // to t entries is off by at most 2⁻¹¹ of itself).
        for h in 0..cfg.n_heads {
            for i in 0..t {
                let row = &w.data()[(h * t + i) * t..][..t];
                let sum: f32 = row.iter().sum();
                assert!(
                    (sum - 1.0).abs() < 1e-3,
                    "layer {l} head {h} row {i}: {sum}"
                );
                assert!(row[i + 1..].iter().all(|&x| x == 0.0));
            }
        }
    }
    assert_eq!(trace.get("logits").unwrap().shape()[0], t);
    let only = model
        .trace_with(
            "The cat sat",
            lucent::Trace::only(&["weights"]).in_layers(&[2]),
        )
        .unwrap();
    assert!(only.names().all(|n| n == "decoder.layer.2.attn.weights"));
}

#[test]
fn a_trained_gpt_generates_through_the_same_loop() {
    let dir = scratch("gpt");
    let corpus = dir.join("corpus.txt");
    std::fs::write(
        &corpus,
        "the whale swam in the sea and the ship sailed after the whale. ".repeat(60),
    )
    .unwrap();
    let cfg = TrainConfig {
        layers: 1,
        d_model: 16,
        heads: 2,
        block: 16,
        batch: 4,
        steps: 4,
        eval_every: 4,
        eval_windows: 4,
        warmup: 1,
        ..TrainConfig::lm(corpus.to_str().unwrap())
    };
    let run = dir.join("run");
    train(cfg, &run, Limits::default(), &mut Quiet, &mut Silent).unwrap();

    let model = lucent::open(run.to_str().unwrap()).unwrap();
    assert_eq!(model.kind(), ModelKind::Decoder);
    assert_eq!(model.config().family, "gpt");
    let mut gen = model.generator().unwrap();
    let s = Sampling {
        top_p: 0.9,
        min_p: 0.05,
        context_shift: true,
        ..Sampling::default().seed(3).max_tokens(40)
    };
    let a = gen.complete("the ", &s).unwrap();
    let b: String = gen
        .stream("the ", &s)
        .unwrap()
        .map(|p| p.unwrap())
        .collect();
    assert_eq!(a, b, "streaming and completing give the same sample");
    assert_eq!(a.chars().count(), 40, "the context (16) shifts: {a:?}");
    let other = gen.complete("the ", &s.clone().seed(4)).unwrap();
    assert_ne!(a, other, "another seed, another sample");
    // Without the shift, generation stops at the full context.
    let g = gen
        .generate(
            &gen.encode("the ").unwrap(),
            &Sampling::greedy().max_tokens(40),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(g.stop, lucent::StopReason::ContextFull(16));
    // No chat template: asking for one is a clear error.
    let e = gen
        .chat(&[Message::new("user", "hi")], &s)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no chat template"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_trained_seq2seq_shows_cross_attention_through_the_trace() {
    let dir = scratch("s2s");
    let cfg = TrainConfig {
        job: Job::Seq2Seq {
            task: Task::Reverse,
            symbols: 5,
            min_len: 2,
            max_len: 5,
            test_size: 20,
        },
        layers: 1,
        d_model: 16,
        heads: 2,
        steps: 3,
        eval_every: 3,
        warmup: 1,
        ..TrainConfig::seq2seq(Task::Reverse)
    };
    let run = dir.join("run");
    train(cfg, &run, Limits::default(), &mut Quiet, &mut Silent).unwrap();
    let model = lucent::open(run.to_str().unwrap()).unwrap();
    assert_eq!(model.kind(), ModelKind::EncoderDecoder);
    let trace = model.trace("abcd").unwrap();
    assert_eq!(trace.tokens(), ["a", "b", "c", "d"]);
    let t = trace.target_tokens().len();
    let w = trace.get("decoder.layer.0.cross_attn.weights").unwrap();
    assert_eq!(w.shape(), [1, 2, t, 4], "(b, h, target, source)");
    assert!(trace.get("encoder.layer.0.attn.weights").is_some());
    let e = model.generator().unwrap_err().to_string();
    assert!(e.contains("encoder-decoder"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gguf_metadata_that_changes_the_arithmetic_is_refused_by_name() {
    use lucent::io::gguf::{GgufValue, GgufWriter};
    let dir = scratch("gguf");
    // Each case: the key that must be named, its value, and keys it needs beside it
    // (shared experts are refused only in a file that has experts).
    for (key, value, beside) in [
        (
            "llama.rope.scaling.type",
            GgufValue::String("longrope".into()),
            None,
        ),
        (
            "llama.rope.scaling.yarn_log_multiplier",
            GgufValue::F32(0.1),
            None,
        ),
        ("llama.final_logit_softcapping", GgufValue::F32(30.0), None),
        (
            "llama.expert_shared_count",
            GgufValue::U32(2),
            Some(("llama.expert_count", GgufValue::U32(8))),
        ),
    ] {
        let mut w = GgufWriter::new();
        w.add("general.architecture", GgufValue::String("llama".into()));
        w.add(key, value);
        if let Some((k, v)) = beside {
            w.add(k, v);
        }
        let p = dir.join("m.gguf");
        w.write(&p).unwrap();
        let e = lucent::model::DecoderModel::load_gguf(&p)
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains("does not implement"), "{e}");
    }
    // "Off" values pass this check (and fail later, on the missing dimensions).
    let mut w = GgufWriter::new();
    w.add("general.architecture", GgufValue::String("llama".into()));
    w.add("llama.rope.scaling.type", GgufValue::String("none".into()));
    let p = dir.join("off.gguf");
    w.write(&p).unwrap();
    let e = lucent::model::DecoderModel::load_gguf(&p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("embedding_length") && !e.contains("does not implement"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_with_an_unused_tensor_is_refused_by_name() {
    let src = lucent::open("minilm").unwrap().path().to_path_buf();
    let dir = scratch("extra");
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    // The real checkpoint plus one tensor no BERT layer reads.
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let extra = vec![0u8; 4 * 384];
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    views.push((
        "encoder.layer.0.attention.self.rotary.inv_freq".into(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![384], &extra).unwrap(),
    ));
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    let e = Embedder::load(&dir).unwrap_err().to_string();
    assert!(
        e.contains("encoder.layer.0.attention.self.rotary.inv_freq") && e.contains("not used"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_generator_is_its_own_cache() {
    // Two generators over one loaded model keep separate conversations.
    let model = lucent::open("smollm2").unwrap();
    let mut a: Generator = model.generator().unwrap();
    let mut b = model.generator().unwrap();
    let s = Sampling::greedy().max_tokens(4);
    let ia = a.encode("The capital of France is").unwrap();
    let ib = b.encode("Water is made of").unwrap();
    a.generate(&ia, &s, &mut |_| {}).unwrap();
    b.generate(&ib, &s, &mut |_| {}).unwrap();
    assert_eq!(a.cached(), ia.len() + 3);
    assert_eq!(b.cached(), ib.len() + 3);
    a.reset();
    assert_eq!((a.cached(), b.cached()), (0, ib.len() + 3));
}
