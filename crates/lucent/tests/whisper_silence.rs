//! Whisper's silence rule in the library, as openai-whisper's `transcribe()` has it: a
//! window whose `<|nospeech|>` probability is above `no_speech_threshold` (0.6) and
//! whose average log-probability is not above `logprob_threshold` (−1) gives no text;
//! the transcript lists it in `silent` and says so in `notes`. No speech clip of the
//! suite is judged silent, and the rules are off when the thresholds are.

use std::path::{Path, PathBuf};

use lucent::pipeline::transcribe::{sample_rate_note, TranscribeOptions, Transcriber};

fn data(path: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../../tests/data/whisper/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

/// `secs` of 16 kHz mono 16-bit zeros.
fn silent_wav(path: &Path, secs: usize) {
    let data = vec![0u8; secs * 16_000 * 2];
    let mut w = Vec::new();
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes()); // the fmt chunk's size
    for v in [1u16, 1] {
        w.extend_from_slice(&v.to_le_bytes()); // PCM, mono
    }
    for v in [16_000u32, 32_000] {
        w.extend_from_slice(&v.to_le_bytes());
    }
    for v in [2u16, 16] {
        w.extend_from_slice(&v.to_le_bytes());
    }
    w.extend_from_slice(b"data");
    w.extend_from_slice(&(data.len() as u32).to_le_bytes());
    w.extend_from_slice(&data);
    std::fs::write(path, w).unwrap();
}

#[test]
fn a_silent_window_gives_no_text_and_a_note() {
    let t = Transcriber::open("whisper-tiny.en").unwrap();
    let wav = std::env::temp_dir().join(format!("lucent-silence-{}.wav", std::process::id()));
    silent_wav(&wav, 5);
    let tr = t.transcribe(&wav, &TranscribeOptions::default()).unwrap();
    assert_eq!(tr.text, "");
    assert!(tr.segments.is_empty());
    assert_eq!(tr.sample_rate, 16_000);
    assert_eq!(tr.silent.len(), 1);
    let w = &tr.silent[0];
    assert_eq!((w.start, w.end), (0.0, 5.0));
    assert!(w.no_speech_prob > 0.6 && w.avg_logprob <= -1.0, "{w:?}");
    assert_eq!(tr.notes.len(), 1);
    assert!(
        tr.notes[0].starts_with("0.00–5.00 s: no speech"),
        "{:?}",
        tr.notes
    );
    // No no-speech threshold: the window is decoded, and nothing is called silent.
    let off = TranscribeOptions {
        no_speech_threshold: None,
        ..TranscribeOptions::default()
    };
    let tr = t.transcribe(&wav, &off).unwrap();
    assert!(tr.silent.is_empty() && tr.notes.is_empty());
    // A log-probability threshold below the window's own keeps it (openai-whisper: "don't
    // skip if the logprob is high enough, despite the no_speech_prob").
    let lenient = TranscribeOptions {
        logprob_threshold: Some(-100.0),
        ..TranscribeOptions::default()
    };
    let tr = t.transcribe(&wav, &lenient).unwrap();
    assert!(tr.silent.is_empty(), "{:?}", tr.silent);
    let _ = std::fs::remove_file(&wav);
}

#[test]
fn no_speech_clip_of_the_suite_is_judged_silent() {
    let t = Transcriber::open("whisper-tiny.en").unwrap();
    for i in 0..12 {
        let clip = data(&format!("clips/{i:02}.wav"));
        let tr = t.transcribe(&clip, &TranscribeOptions::default()).unwrap();
        assert!(tr.silent.is_empty(), "clip {i:02}: {:?}", tr.silent);
        assert!(tr.notes.is_empty(), "clip {i:02}: {:?}", tr.notes);
        assert!(!tr.text.trim().is_empty(), "clip {i:02} gave no text");
    }
}

#[test]
fn low_sample_rates_get_a_note() {
    assert!(sample_rate_note(4_000).unwrap().contains("4000 Hz"));
    assert!(sample_rate_note(7_999).is_some());
    assert!(sample_rate_note(8_000).is_none());
    assert!(sample_rate_note(16_000).is_none());
}
