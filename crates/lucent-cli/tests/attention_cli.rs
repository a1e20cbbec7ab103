//! `lucent attention -m MODEL INPUT` as a user runs it, for every model kind: one JSON
//! shape (`--head` keeps one head in the same shape for an encoder, a decoder and
//! Whisper), `--token` and `--steps` on a decoder, clear errors, the last layer by
//! default, and Whisper's pictures within `lucent::viz::MAX_SIDE` pixels a side for a
//! 30-second clip, with the downsampling written on them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const TEXT: &str = "The cat sat on the mat";

fn lucent(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lucent"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json(args: &[&str]) -> Value {
    let (ok, out, err) = lucent(args);
    assert!(ok, "lucent {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap()
}

/// SmolLM2's attention on TEXT as JSON, head 2, with `extra` flags.
fn head_2(extra: &[&str]) -> Value {
    let mut args = vec!["attention", "-m", "smollm2", TEXT, "--json", "--head", "2"];
    args.extend_from_slice(extra);
    json(&args)
}

fn fails(args: &[&str], needle: &str) {
    let (ok, _, err) = lucent(args);
    assert!(!ok, "lucent {args:?} should fail");
    assert!(!err.contains("panicked"), "lucent {args:?} panicked: {err}");
    assert!(
        err.contains(needle),
        "lucent {args:?}: expected {needle:?} in {err}"
    );
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("attention-cli-{name}"))
}

fn speech() -> String {
    root().join("examples/speech.wav").display().to_string()
}

/// The weights of the one head a `--head` run printed: (rows, keys).
fn one_head(v: &Value, head: usize) -> Vec<Vec<f64>> {
    let heads = v["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 1, "--head {head}: {} heads", heads.len());
    assert_eq!(heads[0]["head"], head);
    serde_json::from_value(heads[0]["weights"].clone()).unwrap()
}

#[test]
fn every_kind_prints_one_json_shape_and_head_filters() {
    let png = tmp("whisper-head.png");
    let png_s = png.display().to_string();
    let wav = speech();
    let runs: [(&str, Vec<&str>, &str, &str, u64); 3] = [
        ("minilm", vec![TEXT], "encoder", "encoder", 5),
        ("smollm2", vec![TEXT], "decoder", "decoder", 29),
        (
            "whisper-tiny.en",
            vec![&wav, "--png", &png_s],
            "encoder-decoder",
            "cross",
            3,
        ),
    ];
    let mut shapes = Vec::new();
    for (model, input, kind, stack, last) in runs {
        let mut args = vec!["attention", "-m", model];
        args.extend(input);
        args.extend(["--json", "--head", "1"]);
        let v = json(&args);
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        // A kind's own extras (decoder ids, kv sharing; Whisper's png) aside.
        keys.retain(|k| {
            ![
                "ids",
                "kv_sharing",
                "window",
                "png",
                "png_notes",
                "text",
                "output",
            ]
            .contains(&k.as_str())
        });
        keys.sort();
        shapes.push((model, keys));
        assert_eq!(v["kind"], kind, "{model}");
        assert_eq!(v["stack"], stack, "{model}");
        // No --layer: the last layer, as --help says.
        assert_eq!(v["layer"], last, "{model}");
        let w = one_head(&v, 1);
        let rows = v["rows"].as_array().unwrap();
        let n_keys = v["keys"].as_array().unwrap().len();
        assert_eq!(w.len(), rows.len(), "{model}");
        assert_eq!(rows.len(), v["tokens"].as_array().unwrap().len(), "{model}");
        for r in &w {
            assert_eq!(r.len(), n_keys, "{model}");
            let s: f64 = r.iter().sum();
            // Whisper's keys stop half a second after the audio (some rows look mostly at
            // the padding past it): its rows sum to at most 1. SmolLM2 runs llama.cpp's
            // f16 steps: its rows sum to 1 within 1e-3.
            let whole = kind != "encoder-decoder";
            assert!(
                s <= 1.0 + 1e-3 && (!whole || s >= 1.0 - 1e-3),
                "{model}: a row sums to {s}"
            );
        }
        let h = &v["heads"][0];
        assert!(h["kv_head"].is_u64() && h["layer"] == last, "{model}: {h}");
    }
    for (model, keys) in &shapes[1..] {
        assert_eq!(keys, &shapes[0].1, "{model}'s JSON differs from minilm's");
    }
    let _ = std::fs::remove_file(&png);
}

#[test]
fn a_decoder_takes_token_and_steps() {
    let all = head_2(&[]);
    assert_eq!(all["n_kv_heads"], 3);
    assert_eq!(all["heads"][0]["kv_head"], 0);
    let full = one_head(&all, 2);
    // --token cat: the row of " cat" (position 1), the same numbers as in the matrix.
    let v = head_2(&["--token", "cat"]);
    assert_eq!(v["rows"], serde_json::json!([1]));
    assert_eq!(one_head(&v, 2), vec![full[1].clone()]);
    // A position works too.
    let v = head_2(&["--token", "4"]);
    assert_eq!(v["rows"], serde_json::json!([4]));
    assert_eq!(one_head(&v, 2), vec![full[4].clone()]);
    // --steps: the arithmetic of that row, recomputed by hand from q, k, v.
    let v = head_2(&["--token", "cat", "--steps"]);
    let s = &v["steps"];
    assert_eq!(s["token"], 1);
    assert_eq!(s["head"], 2);
    assert_eq!(s["kv_head"], 0);
    assert_eq!(s["d_k"], 64);
    assert!(
        (s["scale"].as_f64().unwrap() - 0.125).abs() < 1e-6,
        "{}",
        s["scale"]
    );
    // The causal mask hides the later keys.
    let mask = s["mask"].as_array().unwrap();
    assert_eq!(mask[0], 0.0);
    assert!(mask[2..].iter().all(Value::is_null), "{mask:?}");
    assert!(s["by_hand_max_diff"].as_f64().unwrap() < 1e-3, "{s}");
    // The text view: the row as bars, then the steps.
    let (ok, out, err) = lucent(&[
        "attention",
        "-m",
        "smollm2",
        TEXT,
        "--head",
        "2",
        "--token",
        "cat",
        "--steps",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("where \" cat\" (position 1) looks"), "{out}");
    assert!(
        out.contains("step by step: head 2 (kv head 0), query \" cat\" (position 1)"),
        "{out}"
    );
    assert!(out.contains("+ mask"), "{out}");
}

#[test]
fn bad_options_are_clear_errors() {
    fails(
        &["attention", "-m", "smollm2", TEXT, "--token", "zebra"],
        "--token 'zebra' is not one of the tokens",
    );
    fails(
        &["attention", "-m", "smollm2", TEXT, "--token", "99"],
        "--token '99'",
    );
    fails(
        &["attention", "-m", "smollm2", TEXT, "--layer", "30"],
        "--layer 30 is out of range",
    );
    fails(
        &["attention", "-m", "smollm2", TEXT, "--head", "9"],
        "--head 9 is out of range",
    );
    fails(
        &["attention", "-m", "minilm", TEXT, "--stack", "encoder"],
        "--stack encoder belongs to encoder-decoders",
    );
    let png = tmp("bad.png").display().to_string();
    fails(
        &[
            "attention",
            "-m",
            "whisper-tiny.en",
            &speech(),
            "--png",
            &png,
            "--token",
            "zebra",
        ],
        "--token 'zebra' is not one of the tokens",
    );
}

/// A WAV of `secs` seconds, 16 kHz mono 16-bit: the reference clips one after another,
/// then silence.
fn long_wav(path: &Path, secs: f64) {
    let mut samples: Vec<u8> = Vec::new();
    let clips = root().join("tests/data/whisper/clips");
    for i in 0..12 {
        let bytes = std::fs::read(clips.join(format!("{i:02}.wav"))).unwrap();
        let at = bytes.windows(4).position(|w| w == b"data").unwrap();
        samples.extend_from_slice(&bytes[at + 8..]);
    }
    let n = (secs * 16_000.0) as usize * 2;
    samples.resize(n, 0);
    write_wav(path, 16_000, &samples);
}

/// A 16-bit mono PCM WAV of `rate` Hz holding the little-endian `data`.
fn write_wav(path: &Path, rate: u32, data: &[u8]) {
    let mut w = Vec::with_capacity(44 + data.len());
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes()); // PCM
    w.extend_from_slice(&1u16.to_le_bytes()); // mono
    w.extend_from_slice(&rate.to_le_bytes());
    w.extend_from_slice(&(rate * 2).to_le_bytes());
    w.extend_from_slice(&2u16.to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&(data.len() as u32).to_le_bytes());
    w.extend_from_slice(data);
    std::fs::write(path, w).unwrap();
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[1..4], b"PNG", "{} is not a PNG", path.display());
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

#[test]
fn whisper_pictures_of_a_30_second_clip_stay_within_4000_pixels() {
    let wav = tmp("long30.wav");
    long_wav(&wav, 30.0);
    let wav_s = wav.display().to_string();
    // The mean cross-attention of every layer: 1500 audio frames wide.
    let png = tmp("cross.png");
    let v = json(&[
        "attention",
        "-m",
        "whisper-tiny.en",
        &wav_s,
        "--png",
        &png.display().to_string(),
        "--json",
    ]);
    let (w, h) = png_size(&png);
    assert!(w <= 4000 && h <= 4000, "cross.png is {w} × {h}");
    let notes: Vec<String> = serde_json::from_value(v["png_notes"].clone()).unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("frames: 1500 → ") && notes[0].contains(", mean of "),
        "{notes:?}"
    );
    // The JSON keeps every frame.
    assert_eq!(v["keys"].as_array().unwrap().len(), 1500);
    assert_eq!(v["layer"], Value::Null);
    assert_eq!(v["heads"].as_array().unwrap().len(), 4);
    // The same note is written on the picture (an SVG keeps it as text).
    let svg = tmp("cross.svg");
    let (ok, out, err) = lucent(&[
        "attention",
        "-m",
        "whisper-tiny.en",
        &wav_s,
        "--png",
        &svg.display().to_string(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("(downsampled: {})", notes[0])),
        "{out}"
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains(&notes[0]),
        "the SVG does not say {:?}",
        notes[0]
    );
    // One layer of the encoder's self-attention: 1500 × 1500 frames per head, six heads.
    let enc = tmp("enc.png");
    let (ok, out, err) = lucent(&[
        "attention",
        "-m",
        "whisper-tiny.en",
        &wav_s,
        "--stack",
        "encoder",
        "--layer",
        "3",
        "--png",
        &enc.display().to_string(),
    ]);
    assert!(ok, "{err}");
    let (w, h) = png_size(&enc);
    assert!(w <= 4000 && h <= 4000, "enc.png is {w} × {h}");
    assert!(
        out.contains("query frames: 1500 → ") && out.contains("key frames: 1500 → "),
        "{out}"
    );
    for p in [wav, png, svg, enc] {
        let _ = std::fs::remove_file(p);
    }
}
