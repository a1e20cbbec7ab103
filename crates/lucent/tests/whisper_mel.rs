//! Whisper's audio front-end held to openai-whisper 20250625 (tests/data/whisper, made by
//! scripts/whisper-reference.sh):
//!
//! - the mel filter banks computed from the Slaney formula equal `mel_filters.npz` from
//!   the openai-whisper sdist (80 and 128 bins) within 1e-6;
//! - the log-mel of every espeak-ng clip equals `log_mel_spectrogram(audio, 80,
//!   padding=N_SAMPLES)` (the transcriber's call) within 1e-4, 128 bins too;
//! - the streamed windows ([`MelStream`]) equal the in-memory spectrogram cut as the
//!   transcriber cuts it, for the clips and for a 95-second signal (4 windows);
//! - the 22.05 kHz stereo clip, down-mixed and resampled by lucent (rubato), against the
//!   same clip through Whisper's loader (ffmpeg, which rounds to 16 bits): samples within
//!   2.4e-3 (rms 4.5e-4, peak 0.33), log-mel within 0.22 (mean 2.8e-3; 0.020 within
//!   40 dB of the loudest value, where ffmpeg's rounding does not reach). Both resamplers
//!   are as far from an ideal band-limited one (FFT of the whole clip): rms 1.5e-3 and
//!   1.6e-3.

use std::io::Read;
use std::path::PathBuf;

use lucent::io::audio::{read_16k, AudioStream};
use lucent::io::mel::{
    first_window, hz_to_mel, mel_filters, mel_to_hz, MelSpectrogram, MelStream, N_FRAMES, N_SAMPLES,
};
use lucent::io::SafetensorsFile;
use serde::Deserialize;

fn data(path: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../../tests/data/whisper/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

#[derive(Deserialize)]
struct Clips {
    clips: Vec<Clip>,
}

#[derive(Deserialize)]
struct Clip {
    file: String,
    sample_rate: u32,
    channels: u16,
    samples: usize,
    content_frames: usize,
}

impl Clip {
    fn key(&self) -> String {
        self.file
            .trim_start_matches("clips/")
            .trim_end_matches(".wav")
            .to_string()
    }
}

fn clips() -> Vec<Clip> {
    let text = std::fs::read_to_string(data("clips.json")).unwrap();
    serde_json::from_str::<Clips>(&text).unwrap().clips
}

fn reference() -> SafetensorsFile {
    SafetensorsFile::open(data("mel_reference.safetensors")).unwrap()
}

/// One array of an `.npz` (a zip of `.npy` files): little-endian f32, C order.
fn npz_f32(path: &PathBuf, name: &str) -> (Vec<usize>, Vec<f32>) {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut bytes = Vec::new();
    zip.by_name(&format!("{name}.npy"))
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[header_start..header_start + header_len]).unwrap();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let dims = header.split("'shape': (").nth(1).unwrap();
    let dims = dims.split(')').next().unwrap();
    let shape: Vec<usize> = dims
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .map(|d| d.trim().parse().unwrap())
        .collect();
    let body = &bytes[header_start + header_len..];
    let values: Vec<f32> = body
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(values.len(), shape.iter().product::<usize>());
    (shape, values)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn slaney_scale_round_trips() {
    for hz in [0.0, 100.0, 999.0, 1000.0, 1001.0, 4000.0, 8000.0] {
        assert!((mel_to_hz(hz_to_mel(hz)) - hz).abs() < 1e-9, "{hz}");
    }
    assert!((hz_to_mel(1000.0) - 15.0).abs() < 1e-12);
}

#[test]
fn filter_banks_equal_whisper_npz() {
    for n_mels in [80usize, 128] {
        let (shape, want) = npz_f32(&data("mel_filters.npz"), &format!("mel_{n_mels}"));
        assert_eq!(shape, vec![n_mels, 201]);
        let got = mel_filters(16_000, 400, n_mels).unwrap();
        let diff = max_abs_diff(&got, &want);
        let peak = want.iter().fold(0.0f32, |m, &w| m.max(w));
        println!("mel_{n_mels}: max |Δ| = {diff:e} (largest weight {peak})");
        assert!(diff <= 1e-6, "mel_{n_mels}: max |Δ| = {diff}");
        let mel = MelSpectrogram::new(n_mels).unwrap();
        assert_eq!(mel.filters(), &got[..]);
    }
}

#[test]
fn log_mel_equals_openai_whisper_on_every_clip() {
    let reference = reference();
    let mel80 = MelSpectrogram::new(80).unwrap();
    let mut worst = 0.0f32;
    for clip in clips().iter().filter(|c| c.sample_rate == 16_000) {
        let key = clip.key();
        let audio = read_16k(data(&clip.file)).unwrap();
        assert_eq!(audio.len(), clip.samples, "{key}");
        let got = mel80.log_mel_spectrogram(&audio, N_SAMPLES).unwrap();
        let [n_mels, frames] = got.dims().unwrap();
        assert_eq!(n_mels, 80);
        assert_eq!(frames, clip.content_frames + N_FRAMES, "{key}");
        let want = reference.tensor(&format!("{key}/mel80")).unwrap();
        assert_eq!(want.shape(), &[80, clip.content_frames]);
        let got = got.narrow(1, 0, clip.content_frames).unwrap();
        let diff = max_abs_diff(got.data(), want.data());
        worst = worst.max(diff);
        assert!(diff <= 1e-4, "clip {key}: max |Δ| = {diff}");
    }
    println!("80 bins, 12 clips: max |Δ| = {worst:e}");
    let audio = read_16k(data("clips/00.wav")).unwrap();
    let got = MelSpectrogram::new(128)
        .unwrap()
        .log_mel_spectrogram(&audio, N_SAMPLES)
        .unwrap();
    let want = reference.tensor("00/mel128").unwrap();
    let frames = want.shape()[1];
    let diff = max_abs_diff(got.narrow(1, 0, frames).unwrap().data(), want.data());
    println!("128 bins, clip 00: max |Δ| = {diff:e}");
    assert!(diff <= 1e-4, "128 bins: max |Δ| = {diff}");
}

#[test]
fn streamed_windows_equal_the_in_memory_cut() {
    for clip in clips().iter().filter(|c| c.sample_rate == 16_000).take(4) {
        let path = data(&clip.file);
        let mut stream = MelStream::open_wav(&path, 80).unwrap();
        let audio = read_16k(&path).unwrap();
        let full = MelSpectrogram::new(80)
            .unwrap()
            .log_mel_spectrogram(&audio, N_SAMPLES)
            .unwrap();
        let content = full.narrow(1, 0, clip.content_frames).unwrap();
        let want = first_window(&content).unwrap();
        let w = stream.window(0).unwrap().unwrap();
        assert_eq!(w.frames, clip.content_frames);
        assert_eq!(w.features.shape(), &[80, N_FRAMES]);
        assert_eq!(w.features.data(), want.data(), "{}", clip.file);
        assert!(stream.window(clip.content_frames).unwrap().is_none());
        assert_eq!(stream.content_frames(), Some(clip.content_frames));
    }
}

/// A 95-second signal with a loud passage late (so the global maximum matters), cut into
/// 30-second steps and at Whisper-like uneven seeks.
#[test]
fn streamed_windows_of_long_audio_equal_the_in_memory_cut() {
    let n = 95 * 16_000 + 77;
    let audio: Vec<f32> = (0..n)
        .map(|i| {
            let t = i as f32 / 16_000.0;
            let loud = if (70.0..71.0).contains(&t) { 0.9 } else { 0.05 };
            loud * (2.0 * std::f32::consts::PI * (220.0 + 30.0 * t) * t).sin()
                + 0.01 * ((i * 7919 % 1000) as f32 / 1000.0 - 0.5)
        })
        .collect();
    let mel = MelSpectrogram::new(80).unwrap();
    let full = mel.log_mel_spectrogram(&audio, N_SAMPLES).unwrap();
    let content = n / 160;
    let chunks = |size: usize| {
        audio
            .chunks(size)
            .map(|c| Ok(c.to_vec()))
            .collect::<Vec<_>>()
            .into_iter()
    };
    let max = mel.max_log_mel(chunks(12_345)).unwrap();
    let full_max = full.data().iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    // The in-memory values are (max(v, max - 8) + 4) / 4; its top value is (max + 4) / 4.
    assert_eq!((max + 4.0) / 4.0, full_max);
    let check = |seeks: &[usize], chunk: usize| {
        let mut stream = MelStream::new(mel.clone(), chunks(chunk), max);
        for &seek in seeks {
            let w = stream.window(seek).unwrap().unwrap();
            let frames = (content - seek).min(N_FRAMES);
            assert_eq!(w.frames, frames, "seek {seek}");
            let cut = full.narrow(1, seek, frames).unwrap();
            let want = first_window(&cut).unwrap();
            assert_eq!(w.features.data(), want.data(), "seek {seek}");
        }
    };
    check(&[0, 3000, 6000, 9000], 4096);
    check(&[0, 2811, 2811, 5000, 7999, 9499], 1000);
    check(&[6000], 2000);
    check(&[0, 9000], 777);
    let mut stream = MelStream::new(mel.clone(), chunks(16_000), max);
    let seeks: Vec<usize> = stream.by_ref().map(|w| w.unwrap().seek).collect();
    assert_eq!(seeks, vec![0, 3000, 6000, 9000]);
    assert!(stream.window(8000).is_err(), "a stream cannot go back");
}

#[test]
fn short_input_is_an_error_not_a_panic() {
    let mel = MelSpectrogram::new(80).unwrap();
    assert!(mel.log_mel_spectrogram(&[0.1; 50], 0).is_err());
    assert!(mel.log_mel_spectrogram(&[0.1; 50], N_SAMPLES).is_ok());
    assert!(MelSpectrogram::new(0).is_err());
    // Silence: every value is (-10 + 4) / 4.
    let silent = mel.log_mel_spectrogram(&[0.0; 1000], N_SAMPLES).unwrap();
    assert!(silent.data().iter().all(|&v| v == -1.5));
}

/// The stereo 22.05 kHz clip: lucent's down-mix and resampler against ffmpeg's (what
/// whisper.audio.load_audio gives), sample by sample and as log-mel.
#[test]
fn stereo_22k_clip_against_whispers_loader() {
    let reference = reference();
    let clip = clips().into_iter().find(|c| c.channels == 2).unwrap();
    assert_eq!(clip.sample_rate, 22_050);
    let stream = AudioStream::open(data(&clip.file)).unwrap();
    assert_eq!(stream.info().frames as usize, clip.samples);
    let audio = read_16k(data(&clip.file)).unwrap();
    let ffmpeg = reference.tensor("stereo22k/audio16k").unwrap();
    let ffmpeg = ffmpeg.data();
    let n = audio.len().min(ffmpeg.len());
    assert!(
        audio.len().abs_diff(ffmpeg.len()) <= 1,
        "{} vs {}",
        audio.len(),
        ffmpeg.len()
    );
    let peak = ffmpeg.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let diff = max_abs_diff(&audio[..n], &ffmpeg[..n]);
    let rms = (audio[..n]
        .iter()
        .zip(&ffmpeg[..n])
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum::<f64>()
        / n as f64)
        .sqrt();
    println!("stereo22k: samples max |Δ| = {diff:e}, rms {rms:e} (peak {peak})");
    // ffmpeg's resampler filters differently near Nyquist and rounds to 16 bits.
    assert!(diff <= 0.01 * peak && rms <= 1e-3, "max {diff}, rms {rms}");
    let mel = MelSpectrogram::new(80).unwrap();
    let got = mel.log_mel_spectrogram(&audio, N_SAMPLES).unwrap();
    let want = reference.tensor("stereo22k/mel80").unwrap();
    let frames = want.shape()[1];
    let got = got.narrow(1, 0, frames).unwrap();
    let diffs: Vec<f32> = got
        .data()
        .iter()
        .zip(want.data())
        .map(|(a, b)| (a - b).abs())
        .collect();
    let max = diffs.iter().fold(0.0f32, |m, &d| m.max(d));
    let mean = diffs.iter().sum::<f32>() / diffs.len() as f32;
    // Within 40 dB of the loudest value (a log10 of 4, a step of 1 here) the rounding of
    // ffmpeg's 16-bit output is far below the signal.
    let top = want.data().iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let loud = diffs
        .iter()
        .zip(want.data())
        .filter(|(_, &w)| w >= top - 1.0)
        .fold(0.0f32, |m, (&d, _)| m.max(d));
    println!(
        "stereo22k: log-mel max |Δ| = {max:e}, mean {mean:e}, within 40 dB of the peak {loud:e}"
    );
    assert!(
        max <= 0.3 && mean <= 0.005 && loud <= 0.03,
        "max {max}, mean {mean}, loud {loud}"
    );
}
