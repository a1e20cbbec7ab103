//! The sampler's links reach every decoding loop through the one step
//! (`Sampler::step` / `Sampler::candidates`): a logit bias and a constraint's mask in
//! Whisper's greedy windows and its beam search, a logit bias and a model kind's rules
//! in a trained encoder-decoder's greedy decoding.
//!
//! References: the greedy ids of whisper-tiny.en on clip 01 made by CTranslate2
//! (`tests/data/whisper/ct2_reference.json`, scripts/whisper_reference.py); the token a
//! ban leaves at step k, read from a full forward over the prompt and the first k ids
//! (not the cached step the decode takes) with the banned logit set to -∞.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use lucent::io::mel::first_window;
use lucent::io::SafetensorsFile;
use lucent::pipeline::generate::LogitRules;
use lucent::pipeline::transcribe::{DecodeOptions, Transcriber};
use lucent::pipeline::{Constraint, Sampler, Sampling};
use lucent::train::data::{Task, BOS, EOS};
use lucent::train::models::{new_seq2seq, Dims};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Deserialize;

fn data(path: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../../tests/data/whisper/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

#[derive(Deserialize)]
struct Run {
    prompt: Vec<u32>,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct Clip {
    notimestamps: Run,
}

#[derive(Deserialize)]
struct ModelRef {
    clips: BTreeMap<String, Clip>,
}

#[derive(Deserialize)]
struct Reference {
    models: BTreeMap<String, ModelRef>,
}

/// whisper-tiny.en, the encoder output of clip 01's window, and CTranslate2's greedy
/// run of it without timestamps.
fn whisper_clip() -> (Transcriber, lucent::Tensor, Run) {
    let text = std::fs::read_to_string(data("ct2_reference.json")).unwrap();
    let mut r: Reference = serde_json::from_str(&text).unwrap();
    let run = r
        .models
        .get_mut("whisper-tiny.en")
        .unwrap()
        .clips
        .remove("01")
        .unwrap()
        .notimestamps;
    let t = Transcriber::open("whisper-tiny.en").unwrap();
    let mels = SafetensorsFile::open(data("mel_reference.safetensors")).unwrap();
    let mel = mels.tensor("01/mel80").unwrap();
    let memory = t.encode(&first_window(&mel).unwrap()).unwrap();
    (t, memory, run)
}

fn decode(
    t: &Transcriber,
    memory: &lucent::Tensor,
    prompt: &[u32],
    opts: &DecodeOptions,
) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(0);
    t.decode_window(memory, prompt, opts, &mut rng)
        .unwrap()
        .tokens
}

fn no_timestamps() -> DecodeOptions {
    DecodeOptions {
        timestamps: false,
        ..DecodeOptions::default()
    }
}

/// The index of the largest value (the first of equal ones).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Banning (-100) the token Whisper's greedy decode picks at step k leaves steps 0..k as
/// they were and changes step k to the likeliest other token the rules allow; the
/// banned token appears nowhere in the window.
#[test]
fn a_logit_bias_reaches_whispers_greedy_windows() {
    let (t, memory, run) = whisper_clip();
    let plain = decode(&t, &memory, &run.prompt, &no_timestamps());
    assert_eq!(
        plain, run.ids,
        "greedy ids without a bias are CTranslate2's"
    );
    let k = 3;
    assert!(run.ids.len() > k + 1, "clip 01 is long enough");
    let banned = run.ids[k];
    let biased = DecodeOptions {
        logit_bias: vec![(banned, -100.0)],
        ..no_timestamps()
    };
    let got = decode(&t, &memory, &run.prompt, &biased);
    assert_eq!(got[..k], run.ids[..k], "the steps before the ban");
    assert!(!got.contains(&banned), "banned token {banned} in {got:?}");
    // Step k's reference: the logits after the prompt and the first k ids (one full
    // forward), under the rules of a step after the first (no `suppress_ids_begin`),
    // the banned token set to -∞.
    let mut prefix = run.prompt.clone();
    prefix.extend_from_slice(&run.ids[..k]);
    let later = DecodeOptions {
        suppress_blank: false,
        ..no_timestamps()
    };
    let mut row = t.first_step(&memory, &prefix, &later).unwrap();
    row[banned as usize] = f32::NEG_INFINITY;
    assert_eq!(got[k], argmax(&row), "step {k} after the ban");
    // +100 forces a token at the first step.
    let forced_id = run.ids[k + 1];
    let forced = DecodeOptions {
        logit_bias: vec![(forced_id, 100.0)],
        max_tokens: 2,
        ..no_timestamps()
    };
    assert_eq!(decode(&t, &memory, &run.prompt, &forced), [forced_id; 2]);
}

/// Regex metacharacters of `text` escaped (Rust `regex` syntax).
fn escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A constraint's mask reaches Whisper's greedy windows: constrained to the text of its
/// own greedy ids, the window gives exactly those ids (the mask allows each of the
/// model's choices); constrained to the first k ids' text followed by digits, the first
/// k ids stay and the rest is digits.
#[test]
fn a_constraint_reaches_whispers_greedy_windows() {
    let (t, memory, run) = whisper_clip();
    let text = t.text(&run.ids).unwrap();
    let exact = DecodeOptions {
        constrain: Some(Constraint::Regex(escape(&text))),
        ..no_timestamps()
    };
    assert_eq!(
        decode(&t, &memory, &run.prompt, &exact),
        run.ids,
        "{text:?}"
    );
    let k = 3;
    let prefix = t.text(&run.ids[..k]).unwrap();
    let digits = DecodeOptions {
        constrain: Some(Constraint::Regex(format!("{}[0-9]+", escape(&prefix)))),
        ..no_timestamps()
    };
    let got = decode(&t, &memory, &run.prompt, &digits);
    assert_eq!(got[..k], run.ids[..k], "the steps the mask allowed");
    let got_text = t.text(&got).unwrap();
    let rest = got_text
        .strip_prefix(prefix.as_str())
        .unwrap_or_else(|| panic!("{got_text:?} does not start with {prefix:?}"));
    assert!(
        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()),
        "{got_text:?}: after {prefix:?} only digits"
    );
}

/// Beam search's candidates pass the same chain: a token of the unbiased beam's result,
/// banned, appears nowhere in the biased beam's result.
#[test]
fn beam_candidates_respect_the_logit_bias() {
    let (t, memory, run) = whisper_clip();
    let beam = DecodeOptions {
        beam_size: 5,
        ..no_timestamps()
    };
    let plain = decode(&t, &memory, &run.prompt, &beam);
    assert!(plain.len() > 4, "{plain:?}");
    for banned in [plain[0], plain[3]] {
        let biased = DecodeOptions {
            logit_bias: vec![(banned, -100.0)],
            ..beam.clone()
        };
        let got = decode(&t, &memory, &run.prompt, &biased);
        assert!(!got.is_empty(), "the biased beam found text");
        assert!(!got.contains(&banned), "banned {banned} in {got:?}");
    }
}

/// A random encoder-decoder of the `reverse` task (what `lucent train seq2seq` starts
/// from) and a source sequence.
fn seq2seq() -> (lucent::model::EncoderDecoderModel, Vec<usize>) {
    let dims = Dims {
        layers: 2,
        d_model: 16,
        heads: 2,
        d_ff: 32,
        block: 40,
        vocab: Task::Reverse.vocab_size(6),
    };
    let model = new_seq2seq(&dims, &mut StdRng::seed_from_u64(3)).unwrap();
    let (src, _) = Task::Reverse.example(6, 5, 9, &mut StdRng::seed_from_u64(4));
    (model, src)
}

/// The logits a full forward gives after BOS and `ids` (the last position's row).
fn next_logits(
    model: &lucent::model::EncoderDecoderModel,
    src: &[usize],
    ids: &[usize],
) -> Vec<f32> {
    let mut tgt = vec![BOS];
    tgt.extend_from_slice(ids);
    let logits = model
        .forward(&[src.to_vec()], &[tgt.clone()], None, None)
        .unwrap(); // (1, t, V)
    let v = logits.last_dim();
    logits.data()[(tgt.len() - 1) * v..tgt.len() * v].to_vec()
}

/// Decode `src` with one sampler: `bias`, and `rules` when given.
fn decode_s2s(
    model: &lucent::model::EncoderDecoderModel,
    src: &[usize],
    bias: Vec<(u32, f32)>,
    rules: Option<Arc<dyn LogitRules>>,
) -> Vec<usize> {
    let mut sampler = Sampler::new(&Sampling {
        logit_bias: bias,
        ..Sampling::greedy()
    })
    .unwrap();
    if let Some(r) = rules {
        sampler = sampler.with_rules(r);
    }
    model
        .decode_with(&[src.to_vec()], None, BOS, EOS, 12, &mut [sampler])
        .unwrap()
        .remove(0)
}

/// Each of `got`'s steps is the full forward's likeliest token after the ids before it,
/// once `edit` has edited its logits (and the step after the last is EOS, unless
/// `got` has 12 ids).
fn check_steps(
    model: &lucent::model::EncoderDecoderModel,
    src: &[usize],
    got: &[usize],
    edit: &dyn Fn(&mut [f32]),
) {
    for k in 0..=got.len().min(11) {
        let mut row = next_logits(model, src, &got[..k]);
        edit(&mut row);
        let want = argmax(&row) as usize;
        match got.get(k) {
            Some(&id) => assert_eq!(id, want, "step {k} of {got:?}"),
            None => assert_eq!(want, EOS, "{got:?} ends at EOS"),
        }
    }
}

/// A trained encoder-decoder's greedy decoding is the one step: `greedy` equals
/// `decode_with` a greedy sampler; with EOS banned (-100) every step is the full
/// forward's likeliest other token; banning also the token of step k (the first new
/// one) changes step k (to the next-best) and not the steps before.
#[test]
fn a_logit_bias_reaches_encoder_decoder_greedy() {
    let (model, src) = seq2seq();
    let plain = model
        .greedy(std::slice::from_ref(&src), None, BOS, EOS, 12)
        .unwrap()
        .remove(0);
    assert_eq!(plain, decode_s2s(&model, &src, Vec::new(), None));
    check_steps(&model, &src, &plain, &|_| {});
    let no_eos = vec![(EOS as u32, -100.0)];
    let long = decode_s2s(&model, &src, no_eos.clone(), None);
    assert_eq!(long.len(), 12, "{long:?}: EOS is banned");
    check_steps(&model, &src, &long, &|z| z[EOS] = f32::NEG_INFINITY);
    // The first step whose token has not come before (a ban reaches back to every
    // step that would take it).
    let k = (1..long.len())
        .find(|&k| !long[..k].contains(&long[k]))
        .unwrap_or_else(|| panic!("{long:?} repeats one token"));
    let banned = long[k];
    let mut bias = no_eos;
    bias.push((banned as u32, -100.0));
    let got = decode_s2s(&model, &src, bias, None);
    assert_eq!(got[..k], long[..k], "the steps before the ban");
    assert!(!got.contains(&banned), "banned {banned} in {got:?}");
    let mut row = next_logits(&model, &src, &long[..k]);
    row[EOS] = f32::NEG_INFINITY;
    row[banned] = f32::NEG_INFINITY;
    assert_eq!(got[k], argmax(&row) as usize, "step {k} after the ban");
}

/// A model kind's rules: only even ids may follow (EOS is 2).
struct EvenOnly;

impl LogitRules for EvenOnly {
    fn apply(&self, logits: &mut [f32], _history: &[u32]) -> lucent::Result<()> {
        for (i, z) in logits.iter_mut().enumerate() {
            if i % 2 == 1 {
                *z = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }
}

/// A rules link (a token mask) reaches a trained encoder-decoder's decoding, after the
/// logit bias: with EOS banned, all 12 ids are even, each the full forward's likeliest
/// even id after the ids before it.
#[test]
fn a_rules_mask_reaches_encoder_decoder_greedy() {
    let (model, src) = seq2seq();
    let got = decode_s2s(
        &model,
        &src,
        vec![(EOS as u32, -100.0)],
        Some(Arc::new(EvenOnly)),
    );
    assert_eq!(got.len(), 12, "{got:?}: EOS is banned");
    assert!(got.iter().all(|&id| id % 2 == 0), "{got:?}");
    check_steps(&model, &src, &got, &|z| {
        EvenOnly.apply(z, &[]).unwrap();
        z[EOS] = f32::NEG_INFINITY;
    });
}
