//! SmolLM2-135M (llama, Q4_1) and Gemma 3 270M (gemma3, Q4_K_M) from their GGUF files,
//! held to llama.cpp (golden files written by llama-cpp-python, tests/data/
//! decoder_reference_*.json), plus generation, sampling and error behaviour.
//!
//! **Both models equal llama.cpp to the bit.** With activations quantised to 8 bits before
//! every matrix product these models are chaotic at the level of rounding (one ulp
//! moved early can cross a quantisation boundary and grow to ~0.1–0.5 of a logit), so
//! lucent reproduces llama.cpp's arithmetic operation for operation (the ops' `llama_cpp` variants,
//! `Numerics::LlamaCpp`, the kernels' summation orders, including llama.cpp's
//! repacked Q4_K kernels and its tiled K-quant product for prompts of 8 rows or more).
//! The golden runs came from an AVX2 build of llama.cpp (llama-cpp-python 0.3.36 built
//! with AVX2 and without AVX-512 reproduces them exactly); an AVX-512 build of the same
//! version differs from them by up to 0.5 of a logit on some prompts, and lucent follows
//! the AVX2 one. The check runs the way llama.cpp ran: the prompt as one batch through a
//! KV cache, then each of llama.cpp's greedy tokens as one decode step (teacher-forced):
//! - prompt ids: equal, exactly;
//! - every first-step top-10 logit within `EXACT.logit` = 1e-4 of llama.cpp's (measured:
//!   0, all 120 equal to the bit; the issue asks for 0.05), the top-10 id sets equal, and
//!   every greedy step equal (SmolLM2 166/166, Gemma 3 192/192);
//! - cached decoding equals the full forward (1e-3; in fact bit-identical) with
//!   `Numerics::RowInvariant`, which gives every query row the same arithmetic
//!   (llama.cpp's own prompt and token paths differ in the last bits);
//! - every instruction-set level this CPU has (scalar, AVX2, AVX-512) gives the same
//!   logits, bit for bit, on a golden prompt and its first greedy steps.
//!
//! The models come from the cache (`lucent::io::fetch::ensure`, fetching if needed).

use std::path::PathBuf;
use std::sync::OnceLock;

use lucent::io::fetch::{self, Silent};
use lucent::io::gguf::GgufFile;
use lucent::io::gguf_tokenizer::GgufTokenizer;
use lucent::model::DecoderModel;
use lucent::pipeline::generate::{argmax, top_logits, TextModel};
use lucent::pipeline::{Message, Sampling, StopReason};
use lucent::{Isa, Numerics, Runtime};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
    top10_ids: Vec<u32>,
    top10_logits: Vec<f32>,
}

struct Loaded {
    model: DecoderModel,
    tokenizer: GgufTokenizer,
}

fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name)
}

fn reference(name: &str) -> Reference {
    let text = std::fs::read_to_string(data_path(&format!("decoder_reference_{name}.json")))
        .expect("golden file");
    serde_json::from_str(&text).expect("golden json")
}

fn load(name: &str) -> Loaded {
    let path = fetch::ensure(name, &mut Silent).expect("fetch model");
    let f = GgufFile::open(&path).expect("open gguf");
    Loaded {
        model: DecoderModel::from_gguf(&f).expect("build model"),
        tokenizer: GgufTokenizer::from_gguf(&f).expect("tokenizer"),
    }
}

fn smollm2() -> &'static Loaded {
    static M: OnceLock<Loaded> = OnceLock::new();
    M.get_or_init(|| load("smollm2"))
}

fn gemma3() -> &'static Loaded {
    static M: OnceLock<Loaded> = OnceLock::new();
    M.get_or_init(|| load("gemma3"))
}

/// How close a model must follow llama.cpp (see the module docs).
struct Tolerance {
    /// First-step logits of llama.cpp's top 10, and the top-10 set's cut-off.
    logit: f32,
    /// A llama.cpp greedy token may differ from lucent's only if it is this close to
    /// lucent's best logit.
    near_tie: f32,
    /// Percent of greedy steps that must be exactly llama.cpp's.
    exact_percent: usize,
}

/// Both models run llama.cpp's arithmetic to the bit: the issue asks for 0.05, measured 0.
const EXACT: Tolerance = Tolerance {
    logit: 1e-4,
    near_tie: 0.0,
    exact_percent: 100,
};

fn check_prompt_ids(m: &Loaded, name: &str) {
    for case in &reference(name).cases {
        let ids = m.tokenizer.encode(&case.prompt, true).unwrap();
        assert_eq!(
            ids, case.prompt_ids,
            "{name}: prompt ids of {:?}",
            case.prompt
        );
    }
}

/// The logits llama.cpp saw before each of its greedy tokens: the prompt as one batch
/// into a KV cache, then each greedy token as one decode step.
fn teacher_forced(m: &Loaded, case: &Case) -> Vec<Vec<f32>> {
    let n = case.greedy_ids.len();
    let mut cache = m.model.new_cache(case.prompt_ids.len() + n);
    let mut rows = vec![m
        .model
        .forward(&case.prompt_ids, Some(&mut cache), true, None)
        .unwrap()
        .into_vec()];
    for &id in &case.greedy_ids[..n - 1] {
        rows.push(
            m.model
                .forward(&[id], Some(&mut cache), true, None)
                .unwrap()
                .into_vec(),
        );
    }
    rows
}

fn check_against_llama_cpp(m: &Loaded, name: &str, tol: &Tolerance) {
    let (mut exact, mut steps, mut worst) = (0, 0, 0.0f32);
    for case in &reference(name).cases {
        let rows = teacher_forced(m, case);
        for (s, (&g, r)) in case.greedy_ids.iter().zip(&rows).enumerate() {
            let a = argmax(r);
            steps += 1;
            if a == g {
                exact += 1;
                continue;
            }
            let gap = r[a as usize] - r[g as usize];
            assert!(
                gap <= tol.near_tie,
                "{name} {:?} step {s}: llama.cpp chose {g}, lucent {a}, {gap} apart (> {})",
                case.prompt,
                tol.near_tie
            );
        }
        let first = &rows[0];
        for (id, l) in case.top10_ids.iter().zip(&case.top10_logits) {
            let got = first[*id as usize];
            worst = worst.max((got - l).abs());
            assert!(
                (got - l).abs() <= tol.logit,
                "{name} {:?}: logit of {id} is {got}, llama.cpp {l}",
                case.prompt
            );
        }
        let cut = case.top10_logits[9];
        let ours: Vec<u32> = top_logits(first, 10).iter().map(|x| x.0).collect();
        for id in ours.iter().filter(|i| !case.top10_ids.contains(i)) {
            assert!(
                first[*id as usize] <= cut + tol.logit,
                "{name} {:?}: lucent's top-10 has {id} ({}) that llama.cpp's lacks (its 10th: {cut})",
                case.prompt,
                first[*id as usize]
            );
        }
        for id in case.top10_ids.iter().filter(|i| !ours.contains(i)) {
            let l = case.top10_logits[case.top10_ids.iter().position(|x| x == id).unwrap()];
            assert!(
                l <= cut + tol.logit,
                "{name} {:?}: llama.cpp's top-10 has {id} ({l}) that lucent's lacks",
                case.prompt
            );
        }
    }
    println!(
        "{name}: {exact}/{steps} greedy steps equal llama.cpp's; largest first-step logit difference {worst}"
    );
    assert!(
        exact * 100 >= steps * tol.exact_percent,
        "{name}: only {exact}/{steps} steps exact"
    );
}

#[test]
fn smollm2_prompt_ids_equal_llama_cpp() {
    check_prompt_ids(smollm2(), "smollm2");
}

#[test]
fn gemma3_prompt_ids_equal_llama_cpp() {
    check_prompt_ids(gemma3(), "gemma3");
}

#[test]
fn smollm2_greedy_and_logits_follow_llama_cpp() {
    check_against_llama_cpp(smollm2(), "smollm2", &EXACT);
}

#[test]
fn gemma3_greedy_and_logits_follow_llama_cpp() {
    check_against_llama_cpp(gemma3(), "gemma3", &EXACT);
}

/// llama.cpp's arithmetic is the same at every instruction-set level this CPU has
/// (scalar, AVX2, AVX-512): a golden prompt and its first greedy steps give the very
/// logits, bit for bit, that the full test above holds to llama.cpp.
fn check_every_level_gives_the_same_bits(m: &Loaded, name: &str) {
    let mut case = reference(name).cases.remove(0);
    case.greedy_ids.truncate(6);
    let bits = |rows: &[Vec<f32>]| -> Vec<Vec<u32>> {
        rows.iter()
            .map(|r| r.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    let mut want: Option<Vec<Vec<u32>>> = None;
    for isa in Isa::available().into_iter().rev() {
        let rt = Runtime::builder().threads(2).isa(isa).build().unwrap();
        let got = bits(&rt.install(|| teacher_forced(m, &case)));
        match &want {
            None => want = Some(got),
            Some(w) => assert!(
                &got == w,
                "{name}: logits at {isa} differ from the top level's"
            ),
        }
    }
}

#[test]
fn smollm2_every_instruction_set_gives_the_same_bits() {
    check_every_level_gives_the_same_bits(smollm2(), "smollm2");
}

#[test]
fn gemma3_every_instruction_set_gives_the_same_bits() {
    check_every_level_gives_the_same_bits(gemma3(), "gemma3");
}

/// Prefill k tokens, then one token at a time through the cache, vs one full forward,
/// with every query row computed alike (`Numerics::RowInvariant`).
fn check_cached_equals_full(loaded: &Loaded) {
    let model = loaded.model.clone().with_numerics(Numerics::RowInvariant);
    let tokenizer = &loaded.tokenizer;
    let ids = tokenizer
        .encode(
            "Once upon a time, there was a little cat who lived by the sea.",
            true,
        )
        .unwrap();
    let full = model.forward(&ids, None, false, None).unwrap(); // (t, V)
    let v = full.shape()[1];
    let mut cache = model.new_cache(ids.len());
    let k = 4;
    let first = model
        .forward(&ids[..k], Some(&mut cache), false, None)
        .unwrap();
    let mut rows: Vec<f32> = first.into_vec();
    for &id in &ids[k..] {
        rows.extend(
            model
                .forward(&[id], Some(&mut cache), true, None)
                .unwrap()
                .into_vec(),
        );
    }
    let d = rows
        .iter()
        .zip(full.data())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert_eq!(rows.len(), ids.len() * v);
    // Tolerance 1e-3 (issue 4); the paths are batch-invariant, so d is 0 in practice.
    assert!(d <= 1e-3, "cached vs full: max |Δlogit| = {d}");
}

#[test]
fn smollm2_cached_decoding_equals_full_forward() {
    check_cached_equals_full(smollm2());
}

#[test]
fn gemma3_cached_decoding_equals_full_forward() {
    check_cached_equals_full(gemma3());
}

fn text_model() -> TextModel {
    TextModel::load(&fetch::ensure("smollm2", &mut Silent).unwrap()).unwrap()
}

#[test]
fn prompt_longer_than_the_context_is_a_clear_error() {
    let m = smollm2();
    let ids = m
        .tokenizer
        .encode("one two three four five six seven", true)
        .unwrap();
    let mut cache = m.model.new_cache(4);
    let e = m
        .model
        .forward(&ids, Some(&mut cache), true, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("do not fit the context of 4"), "{e}");
    assert_eq!(cache.len(), 0, "nothing was written");
    let tm = text_model();
    let e = tm
        .generate(&ids, &Sampling::greedy(), &mut cache, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("context holds 4") && e.contains("shorten the prompt"),
        "{e}"
    );
}

#[test]
fn generation_stops_at_the_context_limit_stop_strings_and_max_tokens() {
    let tm = text_model();
    let ids = tm.encode("The capital of France is").unwrap();
    let mut streamed = String::new();
    let mut cache = tm.model.new_cache(ids.len() + 3);
    let opts = Sampling {
        max_tokens: 10,
        ..Sampling::greedy()
    };
    let g = tm
        .generate(&ids, &opts, &mut cache, &mut |s| streamed.push_str(s))
        .unwrap();
    assert_eq!(g.stop, StopReason::ContextFull(ids.len() + 3));
    assert_eq!(g.ids.len(), 4);
    assert_eq!(streamed, g.text);

    let mut cache = tm.model.new_cache(64);
    let opts = Sampling {
        max_tokens: 20,
        stop: vec!["\n".into()],
        ..Sampling::greedy()
    };
    streamed.clear();
    let g = tm
        .generate(&ids, &opts, &mut cache, &mut |s| streamed.push_str(s))
        .unwrap();
    assert_eq!(g.text, " Paris.");
    assert_eq!(streamed, " Paris.");
    assert_eq!(g.stop, StopReason::StopString("\n".into()));

    let opts = Sampling {
        max_tokens: 3,
        ignore_eos: true,
        ..Sampling::greedy()
    };
    let g = tm.generate(&ids, &opts, &mut cache, &mut |_| {}).unwrap();
    assert_eq!((g.ids.len(), g.stop), (3, StopReason::MaxTokens));
}

#[test]
fn chat_template_and_end_of_turn() {
    let tm = text_model();
    let ids = tm
        .encode_chat(&[Message::new("user", "What is 2 + 2?")])
        .unwrap();
    let text = tm.tokenizer.decode_ids(&ids, false).unwrap();
    // Only the messages given: SmolLM2's template would write a system message of its
    // own ("You are a helpful AI assistant named SmolLM…"), which lucent leaves out...
    assert_eq!(
        text,
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    );
    // ...unless asked to keep it, as llama.cpp does.
    let kept = tm
        .keeping_default_system(true)
        .encode_chat(&[Message::new("user", "What is 2 + 2?")])
        .unwrap();
    let kept = tm.tokenizer.decode_ids(&kept, false).unwrap();
    assert!(
        kept.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"),
        "{kept}"
    );
    assert!(kept.ends_with(&text), "{kept}");
    // A system message given is kept in its place.
    let given = tm
        .encode_chat(&[
            Message::new("system", "Be brief."),
            Message::new("user", "What is 2 + 2?"),
        ])
        .unwrap();
    assert_eq!(
        tm.tokenizer.decode_ids(&given, false).unwrap(),
        format!("<|im_start|>system\nBe brief.<|im_end|>\n{text}")
    );
    let mut cache = tm.model.new_cache(ids.len() + 64);
    let opts = Sampling {
        max_tokens: 64,
        ..Sampling::greedy()
    };
    let g = tm.generate(&ids, &opts, &mut cache, &mut |_| {}).unwrap();
    assert!(
        matches!(g.stop, StopReason::EndOfGeneration(_)),
        "{:?}",
        g.stop
    );
    assert!(g.text.contains('4'), "{}", g.text);
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let tm = text_model();
    let ids = tm.encode("Once upon a time").unwrap();
    let run = |seed: u64| {
        let mut cache = tm.model.new_cache(64);
        let opts = Sampling {
            max_tokens: 12,
            ignore_eos: true,
            temperature: 1.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.02,
            repeat_penalty: 1.1,
            seed,
            ..Sampling::greedy()
        };
        tm.generate(&ids, &opts, &mut cache, &mut |_| {})
            .unwrap()
            .ids
    };
    let a = run(7);
    assert_eq!(a, run(7));
    assert!(
        (8..12).any(|s| run(s) != a),
        "different seeds never changed the text"
    );
}

#[test]
fn unknown_architecture_is_named() {
    use lucent::io::gguf::{GgufValue, GgufWriter};
    let mut w = GgufWriter::new();
    w.add("general.architecture", GgufValue::String("mamba".into()));
    let dir = std::env::temp_dir().join(format!("lucent-dec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("m.gguf");
    w.write(&p).unwrap();
    let e = DecoderModel::load_gguf(&p).unwrap_err().to_string();
    assert!(
        e.contains("architecture 'mamba'") && e.contains("llama"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
