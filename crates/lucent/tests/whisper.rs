//! Whisper as a family of the generic encoder-decoder, against CTranslate2 4.8.5
//! (compute_type float32) fed the same log-mel windows (tests/data/whisper, made by
//! scripts/whisper_reference.py):
//!
//! - the first step's logits after the decoding rules (top 20 and every 1000th id),
//!   within `LOGIT_TOL`, and the same ids suppressed;
//! - greedy ids equal CTranslate2's on every clip for both models, without and with
//!   timestamps (Whisper's timestamp rules), and for whisper-base with the detected
//!   language (and the same language detected);
//! - a cached decoding step equals the full forward; cross-attention's K, V computed
//!   once per window equal those computed at each step.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lucent::io::mel::first_window;
use lucent::io::SafetensorsFile;
use lucent::pipeline::transcribe::{DecodeOptions, Transcriber};
use serde::Deserialize;

/// The largest gap between lucent's and CTranslate2's first-step logits (f16 weights
/// widened, f32 arithmetic on both sides): the issue asks for 1e-2; measured 2.9e-5
/// (tiny.en) and 5.6e-5 (base) with lucent's own kernels (ops::linear_kernel), so the
/// test holds 1e-4.
const LOGIT_TOL: f32 = 1e-4;

fn data(path: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../../tests/data/whisper/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

#[derive(Deserialize)]
struct FirstStep {
    top_ids: Vec<usize>,
    top_logits: Vec<f32>,
    sampled_ids: Vec<usize>,
    sampled_logits: Vec<f32>,
    suppressed: usize,
}

#[derive(Deserialize)]
struct Run {
    prompt: Vec<u32>,
    ids: Vec<u32>,
    first_step: FirstStep,
}

#[derive(Deserialize)]
struct Clip {
    notimestamps: Run,
    timestamps: Run,
    #[serde(default)]
    detected: Vec<(String, f32)>,
    detected_notimestamps: Option<Run>,
}

#[derive(Deserialize)]
struct ModelRef {
    clips: BTreeMap<String, Clip>,
}

#[derive(Deserialize)]
struct Reference {
    models: BTreeMap<String, ModelRef>,
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(data("ct2_reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn transcriber(name: &str) -> Transcriber {
    Transcriber::open(name).unwrap_or_else(|e| panic!("open {name}: {e}"))
}

/// The encoder output of each reference clip's window (the same features CTranslate2
/// read).
fn memories(t: &Transcriber, clips: &BTreeMap<String, Clip>) -> BTreeMap<String, lucent::Tensor> {
    clips
        .keys()
        .map(|key| (key.clone(), memory_of(t, key)))
        .collect()
}

/// The encoder output of the reference window of clip `key`.
fn memory_of(t: &Transcriber, key: &str) -> lucent::Tensor {
    let mels = SafetensorsFile::open(data("mel_reference.safetensors")).unwrap();
    let mel = mels.tensor(&format!("{key}/mel80")).unwrap();
    t.encode(&first_window(&mel).unwrap()).unwrap()
}

/// Check the first step of `run` and return the largest logit gap.
fn check_first_step(
    t: &Transcriber,
    memory: &lucent::Tensor,
    run: &Run,
    timestamps: bool,
    what: &str,
) -> f32 {
    let opts = DecodeOptions {
        timestamps,
        ..DecodeOptions::default()
    };
    let row = t.first_step(memory, &run.prompt, &opts).unwrap();
    let suppressed = row.iter().filter(|x| **x == f32::NEG_INFINITY).count();
    assert_eq!(
        suppressed, run.first_step.suppressed,
        "{what}: suppressed ids"
    );
    let mut gap = 0f32;
    for (ids, want) in [
        (&run.first_step.top_ids, &run.first_step.top_logits),
        (&run.first_step.sampled_ids, &run.first_step.sampled_logits),
    ] {
        for (&id, &w) in ids.iter().zip(want) {
            gap = gap.max((row[id] - w).abs());
        }
    }
    assert!(
        gap <= LOGIT_TOL,
        "{what}: first-step logits differ by {gap}"
    );
    // The likeliest id is the same (the top ids are ordered as CTranslate2's up to ties
    // closer than the tolerance).
    let best = (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap();
    assert_eq!(best, run.first_step.top_ids[0], "{what}: first greedy id");
    gap
}

fn check_model(name: &str) {
    let r = reference();
    let m = &r.models[name];
    let t = transcriber(name);
    let memories = memories(&t, &m.clips);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
    let mut worst = 0f32;
    for (key, clip) in &m.clips {
        let memory = &memories[key];
        for (run, timestamps) in [(&clip.notimestamps, false), (&clip.timestamps, true)] {
            let what = format!("{name} clip {key} timestamps={timestamps}");
            worst = worst.max(check_first_step(&t, memory, run, timestamps, &what));
            let opts = DecodeOptions {
                timestamps,
                ..DecodeOptions::default()
            };
            let got = t
                .decode_window(memory, &run.prompt, &opts, &mut rng)
                .unwrap();
            assert_eq!(got.tokens, run.ids, "{what}: greedy ids ({:?})", got.text);
        }
        if let Some(run) = &clip.detected_notimestamps {
            let langs = t.detect_language(memory).unwrap();
            let (want_lang, want_p) = &clip.detected[0];
            assert_eq!(
                format!("<|{}|>", langs[0].0),
                *want_lang,
                "{name} clip {key}: language"
            );
            assert!(
                (langs[0].1 - want_p).abs() < 1e-3,
                "{name} clip {key}: p({want_lang}) {} vs {want_p}",
                langs[0].1
            );
            let prompt = t
                .prompt(Some(&langs[0].0), Default::default(), false)
                .unwrap();
            assert_eq!(
                prompt, run.prompt,
                "{name} clip {key}: prompt with the detected language"
            );
            let got = t
                .decode_window(
                    memory,
                    &prompt,
                    &DecodeOptions {
                        timestamps: false,
                        ..DecodeOptions::default()
                    },
                    &mut rng,
                )
                .unwrap();
            assert_eq!(
                got.tokens, run.ids,
                "{name} clip {key}: ids with the detected language"
            );
        }
    }
    eprintln!("{name}: largest first-step logit gap vs CTranslate2 {worst:.2e}");
}

#[test]
fn tiny_en_equals_ctranslate2() {
    check_model("whisper-tiny.en");
}

#[test]
fn base_equals_ctranslate2() {
    check_model("whisper-base");
}

/// Decoding step by step through the KV cache (cross-attention's K, V of the memory
/// computed once, at the first step) equals the teacher-forced forward without a cache.
#[test]
fn cached_decoding_equals_the_full_forward() {
    let r = reference();
    let m = &r.models["whisper-tiny.en"];
    let t = transcriber("whisper-tiny.en");
    let clip = &m.clips["01"];
    let memory = memory_of(&t, "01");
    let ids: Vec<usize> = clip
        .timestamps
        .prompt
        .iter()
        .chain(&clip.timestamps.ids)
        .map(|&i| i as usize)
        .collect();
    let full = t
        .model
        .decode(std::slice::from_ref(&ids), &memory, None, None, None)
        .unwrap(); // (1, n, V)
    let mut cache = t.model.new_cache(1, 448);
    let v = t.model.config.vocab_size;
    let mut worst = 0f32;
    for (p, &id) in ids.iter().enumerate() {
        let step = t
            .model
            .decode(&[vec![id]], &memory, None, Some(&mut cache), None)
            .unwrap();
        assert!(cache.layer(0).unwrap().memory_kv().is_some());
        let want = &full.data()[p * v..(p + 1) * v];
        for (a, b) in step.data().iter().zip(want) {
            worst = worst.max((a - b).abs());
        }
    }
    assert!(worst < 1e-4, "cached vs full logits differ by {worst}");
}

/// Sampled decoding (the temperature fallback's windows) draws through the one
/// `Sampler` of every decoding loop: a seed gives the same tokens twice, a different
/// seed at T = 1 gives other tokens, every drawn token is one Whisper's rules allow
/// (its log-probability is finite), and at a temperature near 0 the draws are the
/// greedy tokens (softmax(z / T) puts all its mass on the argmax).
#[test]
fn sampled_windows_draw_through_the_one_sampler() {
    use rand::SeedableRng;
    let r = reference();
    let m = &r.models["whisper-tiny.en"];
    let t = transcriber("whisper-tiny.en");
    let clip = &m.clips["01"];
    let memory = memory_of(&t, "01");
    let prompt = &clip.notimestamps.prompt;
    let decode = |temperature: f32, seed: u64| {
        let opts = DecodeOptions {
            timestamps: false,
            temperature,
            ..DecodeOptions::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        t.decode_window(&memory, prompt, &opts, &mut rng).unwrap()
    };
    let a = decode(1.0, 7);
    let b = decode(1.0, 7);
    assert_eq!(a.tokens, b.tokens, "the same seed draws the same tokens");
    assert!(a.sum_logprob.is_finite(), "a drawn token the rules ban");
    let others: Vec<Vec<u32>> = (8..12).map(|s| decode(1.0, s).tokens).collect();
    assert!(
        others.iter().any(|o| *o != a.tokens),
        "five seeds at T = 1 drew the same {} tokens",
        a.tokens.len()
    );
    let cold = decode(1e-4, 3);
    assert_eq!(
        cold.tokens, clip.notimestamps.ids,
        "T → 0 draws the greedy ids"
    );
}
