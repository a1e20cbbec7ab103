//! `lucent transcribe` as a user runs it: the shipped sample (`examples/speech.wav`)
//! gives its words; a silent window gives no text and a note (stderr, and `silent` and
//! `notes` in `--json`), as openai-whisper's thresholds judge it, and the thresholds are
//! flags (`none` turns one off); audio below 8 kHz gets a one-line warning.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("transcribe-cli-{name}"))
}

/// A 16-bit mono PCM WAV of `rate` Hz holding `samples`.
fn write_wav(path: &Path, rate: u32, samples: &[i16]) {
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
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
    w.extend_from_slice(&data);
    std::fs::write(path, w).unwrap();
}

/// The 16-bit samples of a 16 kHz mono WAV (its data chunk).
fn read_samples(path: &Path) -> Vec<i16> {
    let b = std::fs::read(path).unwrap();
    let at = b.windows(4).position(|w| w == b"data").unwrap();
    b[at + 8..]
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}

#[test]
fn the_shipped_sample_gives_its_words() {
    let wav = root().join("examples/speech.wav");
    let size = std::fs::metadata(&wav).unwrap().len();
    assert!(size < 200_000, "examples/speech.wav is {size} bytes");
    let (ok, out, err) = lucent(&[
        "transcribe",
        "-m",
        "whisper-tiny.en",
        &wav.display().to_string(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "Every word can look at every other word in the sentence."
    );
    assert!(err.is_empty(), "no notes for clear speech: {err}");
}

#[test]
fn silence_gives_no_text_and_a_note() {
    let wav = tmp("silence.wav");
    write_wav(&wav, 16_000, &vec![0i16; 5 * 16_000]);
    let wav_s = wav.display().to_string();
    let (ok, out, err) = lucent(&["transcribe", &wav_s]);
    assert!(ok, "{err}");
    assert_eq!(out, "", "silence prints nothing");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("note: 0.00–5.00 s: no speech (p(<|nospeech|>) ") && err.contains("> 0.6"),
        "{err}"
    );
    let (ok, out, err) = lucent(&["transcribe", &wav_s, "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["text"], "");
    assert_eq!(v["segments"], serde_json::json!([]));
    let silent = v["silent"].as_array().unwrap();
    assert_eq!(silent.len(), 1);
    assert_eq!(silent[0]["start"], 0.0);
    assert_eq!(silent[0]["end"], 5.0);
    assert!(silent[0]["no_speech_prob"].as_f64().unwrap() > 0.6);
    assert!(silent[0]["avg_logprob"].as_f64().unwrap() <= -1.0);
    assert_eq!(v["notes"].as_array().unwrap().len(), 1);
    assert!(err.contains(v["notes"][0].as_str().unwrap()), "{err}");
    // With the no-speech rule off, the window is decoded like any other.
    let (ok, out, err) = lucent(&[
        "transcribe",
        &wav_s,
        "--json",
        "--no-speech-threshold",
        "none",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["silent"], serde_json::json!([]));
    assert_eq!(v["notes"], serde_json::json!([]));
    // A threshold the window's probability does not pass keeps it too.
    let (ok, out, err) = lucent(&[
        "transcribe",
        &wav_s,
        "--json",
        "--no-speech-threshold",
        "0.99",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["silent"], serde_json::json!([]));
    // Negative log-probabilities parse; a word does not.
    let (ok, _, err) = lucent(&["transcribe", &wav_s, "--logprob-threshold", "-2.5"]);
    assert!(ok, "{err}");
    let (ok, _, err) = lucent(&[
        "transcribe",
        &wav_s,
        "--compression-ratio-threshold",
        "lots",
    ]);
    assert!(
        !ok && err.contains("--compression-ratio-threshold"),
        "{err}"
    );
    let _ = std::fs::remove_file(&wav);
}

#[test]
fn audio_below_8_khz_is_warned_about() {
    // The sample at 4 kHz: every fourth sample (what a careless down-sampler does).
    let s = read_samples(&root().join("examples/speech.wav"));
    let low: Vec<i16> = s.iter().step_by(4).copied().collect();
    let wav = tmp("4k.wav");
    write_wav(&wav, 4_000, &low);
    let (ok, _, err) = lucent(&["transcribe", &wav.display().to_string(), "--json"]);
    assert!(ok, "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("sampled at 4000 Hz"), "{err}");
    // 8 kHz and up: no warning.
    let wav8 = tmp("8k.wav");
    let eight: Vec<i16> = s.iter().step_by(2).copied().collect();
    write_wav(&wav8, 8_000, &eight);
    let (ok, _, err) = lucent(&["transcribe", &wav8.display().to_string()]);
    assert!(ok, "{err}");
    assert!(!err.contains("warning:"), "{err}");
    let _ = std::fs::remove_file(&wav);
    let _ = std::fs::remove_file(&wav8);
}
