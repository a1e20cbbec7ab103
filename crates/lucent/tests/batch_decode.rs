//! Continuous batching's model step, held to the lone path bit for bit, on SmolLM2
//! (Q4_1) and Gemma 3 (Q4_K_M):
//!
//! - `DecoderModel::decode_batch` (n sequences, one new token each, each over its own
//!   cache at its own position) gives every row exactly the logits that sequence's lone
//!   decode step (`forward(&[id], cache, true)`) gives, whatever else is in the batch
//!   and however the batch changes from step to step (sequences joining and leaving);
//! - greedy decoding of all golden prompts in one batch gives llama.cpp's greedy tokens
//!   (tests/data/decoder_reference_*.json);
//! - a prompt prefilled in pieces cut by `prompt_chunks` ends with the same logits as
//!   the whole prompt at once (and, for a contrast, pieces cut elsewhere do not
//!   always);
//! - a traced batch step gives the same logits as an untraced one, and each sequence's
//!   attention weights equal its lone traced step's.

use std::sync::OnceLock;

use lucent::io::fetch::{self, Silent};
use lucent::nn::{KvCache, Trace};
use lucent::pipeline::generate::{argmax, prompt_chunks, TextModel};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
}

fn reference(name: &str) -> Reference {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../tests/data/decoder_reference_{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("golden file")).expect("json")
}

fn load(name: &str) -> TextModel {
    TextModel::load(&fetch::ensure(name, &mut Silent).expect("fetch")).expect("load")
}

fn smollm2() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| load("smollm2"))
}

fn gemma3() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| load("gemma3"))
}

/// Sixteen prompts of different lengths (1 to ~60 tokens).
fn prompts(tm: &TextModel) -> Vec<Vec<u32>> {
    let texts = [
        "The capital of France is",
        "Once upon a time",
        "1, 2, 3, 4,",
        "def fibonacci(n):",
        "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog again and again, until",
        "Water boils at",
        "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n",
        "A",
        "In 1492, Columbus",
        "The mitochondria is",
        "Roses are red, violets are blue,",
        "Translate to French: cat ->",
        "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world.",
        "The best way to learn Rust is",
        "Q: Why is the sky blue?\nA:",
        "Here is a list of fruits: apple, banana,",
    ];
    texts
        .iter()
        .map(|t| tm.encode(t).expect("encode"))
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A sequence under way: its cache and the token to feed next.
struct Seq {
    cache: KvCache,
    next: u32,
    steps: usize,
}

/// Prefill `ids` alone into a fresh cache; the greedy first token.
fn start(tm: &TextModel, ids: &[u32], room: usize) -> Seq {
    let mut cache = tm.new_cache(ids.len() + room);
    let row = tm
        .model
        .forward(ids, Some(&mut cache), true, None)
        .unwrap()
        .into_vec();
    Seq {
        cache,
        next: argmax(&row),
        steps: 0,
    }
}

/// Sixteen sequences decoded greedily, each alone and all in batches that change from
/// step to step (sequence i joins at step i / 4 and leaves after 4 + i % 5 steps): every
/// row of every batch equals the lone step's logits bit for bit.
fn check_batch_equals_alone(tm: &TextModel, name: &str) {
    let ps = prompts(tm);
    let steps_of = |i: usize| 4 + i % 5;
    // Alone: each sequence's logits at each step.
    let alone: Vec<Vec<Vec<f32>>> = ps
        .iter()
        .enumerate()
        .map(|(i, ids)| {
            let mut s = start(tm, ids, 16);
            (0..steps_of(i))
                .map(|_| {
                    let row = tm
                        .model
                        .forward(&[s.next], Some(&mut s.cache), true, None)
                        .unwrap()
                        .into_vec();
                    s.next = argmax(&row);
                    row
                })
                .collect()
        })
        .collect();
    // Batched: the same sequences, joining and leaving.
    let mut seqs: Vec<Option<Seq>> = (0..ps.len()).map(|_| None).collect();
    let mut largest = 0;
    for step in 0.. {
        for (i, ids) in ps.iter().enumerate() {
            if seqs[i].is_none() && i / 4 == step {
                seqs[i] = Some(start(tm, ids, 16));
            }
        }
        let active: Vec<usize> = (0..ps.len())
            .filter(|&i| seqs[i].as_ref().is_some_and(|s| s.steps < steps_of(i)))
            .collect();
        if active.is_empty() && step > ps.len() / 4 {
            break;
        }
        if active.is_empty() {
            continue;
        }
        largest = largest.max(active.len());
        let ids: Vec<u32> = active
            .iter()
            .map(|&i| seqs[i].as_ref().unwrap().next)
            .collect();
        let mut caches: Vec<&mut KvCache> = Vec::new();
        for (i, s) in seqs.iter_mut().enumerate() {
            if active.contains(&i) {
                caches.push(&mut s.as_mut().unwrap().cache);
            }
        }
        let logits = tm.model.decode_batch(&ids, &mut caches, &mut []).unwrap(); // (n, V)
        let v = logits.shape()[1];
        for (r, &i) in active.iter().enumerate() {
            let s = seqs[i].as_mut().unwrap();
            let row = &logits.data()[r * v..(r + 1) * v];
            assert!(
                bits(row) == bits(&alone[i][s.steps]),
                "{name}: sequence {i}, step {}, in a batch of {}: logits differ from its lone step",
                s.steps,
                active.len()
            );
            s.next = argmax(row);
            s.steps += 1;
        }
    }
    assert!(
        largest >= 12,
        "{name}: batches reached only {largest} sequences"
    );
}

#[test]
fn smollm2_batched_decode_equals_lone_decode_bit_for_bit() {
    check_batch_equals_alone(smollm2(), "smollm2");
}

#[test]
fn gemma3_batched_decode_equals_lone_decode_bit_for_bit() {
    check_batch_equals_alone(gemma3(), "gemma3");
}

/// All golden prompts prefilled alone, then decoded greedily in one batch: each
/// sequence's tokens are llama.cpp's.
fn check_batch_greedy_equals_llama_cpp(tm: &TextModel, name: &str) {
    let cases = reference(name).cases;
    let n = cases.iter().map(|c| c.greedy_ids.len()).max().unwrap_or(0);
    let mut seqs: Vec<Seq> = cases
        .iter()
        .map(|c| start(tm, &c.prompt_ids, n + 1))
        .collect();
    let mut got: Vec<Vec<u32>> = seqs.iter().map(|s| vec![s.next]).collect();
    for _ in 1..n {
        let ids: Vec<u32> = seqs.iter().map(|s| s.next).collect();
        let mut caches: Vec<&mut KvCache> = seqs.iter_mut().map(|s| &mut s.cache).collect();
        let logits = tm.model.decode_batch(&ids, &mut caches, &mut []).unwrap();
        let v = logits.shape()[1];
        for (i, s) in seqs.iter_mut().enumerate() {
            s.next = argmax(&logits.data()[i * v..(i + 1) * v]);
            got[i].push(s.next);
        }
    }
    for (c, g) in cases.iter().zip(&got) {
        assert_eq!(
            &g[..c.greedy_ids.len()],
            &c.greedy_ids[..],
            "{name}: greedy tokens in a batch"
        );
    }
}

#[test]
fn smollm2_batched_greedy_equals_llama_cpp() {
    check_batch_greedy_equals_llama_cpp(smollm2(), "smollm2");
}

#[test]
fn gemma3_batched_greedy_equals_llama_cpp() {
    check_batch_greedy_equals_llama_cpp(gemma3(), "gemma3");
}

/// A long prompt (~300 tokens) prefilled in `prompt_chunks` pieces ends with the whole
/// prompt's logits, bit for bit, for several chunk sizes.
fn check_chunked_prefill(tm: &TextModel, name: &str) {
    let text = "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, \
                and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part \
                of the world. It is a way I have of driving off the spleen and regulating the circulation. ";
    let ids = tm.encode(&text.repeat(5)).unwrap();
    let t = ids.len();
    assert!(t > 250, "{t}");
    let mut cache = tm.new_cache(t);
    let whole = tm
        .model
        .forward(&ids, Some(&mut cache), true, None)
        .unwrap()
        .into_vec();
    let mut report = Vec::new();
    for chunk in [16, 64, 100, 128, 256] {
        let mut cache = tm.new_cache(t);
        let mut last = Vec::new();
        for r in prompt_chunks(t, chunk) {
            last = tm
                .model
                .forward(&ids[r], Some(&mut cache), true, None)
                .unwrap()
                .into_vec();
        }
        assert!(
            bits(&last) == bits(&whole),
            "{name}: {t} prompt tokens in pieces of {chunk}: last logits differ from the whole prompt's"
        );
        report.push(chunk);
    }
    // Pieces of 6 (not a multiple of 4, shorter than 8 rows): compare and report.
    let mut cache = tm.new_cache(t);
    let mut last = Vec::new();
    for r in (0..t).step_by(6).map(|s| s..(s + 6).min(t)) {
        last = tm
            .model
            .forward(&ids[r], Some(&mut cache), true, None)
            .unwrap()
            .into_vec();
    }
    let d = last
        .iter()
        .zip(&whole)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("{name}: {t} tokens; pieces of {report:?} equal the whole prompt; pieces of 6: max |Δlogit| {d}");
}

#[test]
fn smollm2_chunked_prefill_equals_whole_prompt() {
    check_chunked_prefill(smollm2(), "smollm2");
}

#[test]
fn gemma3_chunked_prefill_equals_whole_prompt() {
    check_chunked_prefill(gemma3(), "gemma3");
}

/// A traced batch step: the same logits as untraced, and the traced sequence's
/// attention weights equal its lone traced step's.
#[test]
fn traced_batch_step_equals_lone_traced_step() {
    let tm = smollm2();
    let ps = prompts(tm);
    let mut a: Vec<Seq> = ps[..4].iter().map(|p| start(tm, p, 4)).collect();
    let mut b: Vec<Seq> = ps[..4].iter().map(|p| start(tm, p, 4)).collect();
    let ids: Vec<u32> = a.iter().map(|s| s.next).collect();
    let plain = {
        let mut caches: Vec<&mut KvCache> = a.iter_mut().map(|s| &mut s.cache).collect();
        tm.model.decode_batch(&ids, &mut caches, &mut []).unwrap()
    };
    let mut tr = Trace::only(&["weights"]);
    let traced = {
        let mut caches: Vec<&mut KvCache> = b.iter_mut().map(|s| &mut s.cache).collect();
        let mut traces = vec![None, Some(&mut tr), None, None];
        tm.model
            .decode_batch(&ids, &mut caches, &mut traces)
            .unwrap()
    };
    assert_eq!(bits(plain.data()), bits(traced.data()));
    // The lone traced step of sequence 1.
    let mut lone = start(tm, &ps[1], 4);
    let mut tl = Trace::only(&["weights"]);
    tm.model
        .forward(&[lone.next], Some(&mut lone.cache), true, Some(&mut tl))
        .unwrap();
    let names: Vec<&str> = tr.names().collect();
    assert_eq!(names, tl.names().collect::<Vec<_>>());
    assert_eq!(names.len(), tm.model.config.decoder_layers);
    for n in names {
        let (x, y) = (tr.get(n).unwrap(), tl.get(n).unwrap());
        assert_eq!(x.shape(), y.shape(), "{n}");
        assert_eq!(bits(x.data()), bits(y.data()), "{n}");
    }
}

/// A model with lucent's own arithmetic (a GPT as `lucent train lm` builds it, f32
/// weights, `Numerics::Lucent`): decode_batch steps each sequence alone, so its rows are
/// its lone steps bit for bit here too, traces included.
#[test]
fn lucent_numerics_batch_equals_lone_steps() {
    use lucent::train::models::{new_gpt, Dims};
    use rand::SeedableRng;
    let dims = Dims {
        layers: 2,
        d_model: 32,
        heads: 4,
        d_ff: 128,
        block: 64,
        vocab: 50,
    };
    let model = new_gpt(&dims, &mut rand::rngs::StdRng::seed_from_u64(7)).unwrap();
    assert_eq!(model.numerics, lucent::Numerics::Lucent);
    let prompts: Vec<Vec<u32>> = (0..5u32)
        .map(|i| (0..3 + 2 * i).map(|j| (7 * i + 3 * j) % 50).collect())
        .collect();
    let fresh = |ids: &[u32]| {
        let mut c = model.new_cache(32);
        model.forward(ids, Some(&mut c), true, None).unwrap();
        c
    };
    let next: Vec<u32> = (0..5u32).map(|i| 11 + i).collect();
    let mut alone = Vec::new();
    let mut alone_weights = Vec::new();
    for (p, &t) in prompts.iter().zip(&next) {
        let mut c = fresh(p);
        let mut tr = Trace::new();
        let row = model
            .forward(&[t], Some(&mut c), true, Some(&mut tr))
            .unwrap();
        alone.push(row.into_vec());
        alone_weights.push(tr.get("decoder.layer.1.attn.weights").unwrap().clone());
    }
    let mut caches: Vec<KvCache> = prompts.iter().map(|p| fresh(p)).collect();
    let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
    let mut traces: Vec<Trace> = (0..5).map(|_| Trace::new()).collect();
    let mut tr: Vec<Option<&mut Trace>> = traces.iter_mut().map(Some).collect();
    let logits = model.decode_batch(&next, &mut refs, &mut tr).unwrap(); // (5, V)
    for (i, row) in logits.data().chunks_exact(50).enumerate() {
        assert!(
            bits(row) == bits(&alone[i]),
            "sequence {i}: batch row differs from its lone step"
        );
        let w = traces[i].get("decoder.layer.1.attn.weights").unwrap();
        assert!(
            bits(w.data()) == bits(alone_weights[i].data()),
            "sequence {i}: traced weights differ from the lone step's"
        );
    }
}
