//! WAV files in every common form, the resampler's accuracy, bad input, and an hour of
//! audio streamed through the log-mel front-end in bounded memory.
//!
//! Every WAV here is written by the test itself with `hound` from a committed 16 kHz
//! clip (tests/data/whisper/clips) or a formula, into a temporary folder.

use std::path::{Path, PathBuf};

use lucent::io::audio::{
    read_16k, resample_to_16k, resampler_blocks, AudioStream, SampleFormat, SAMPLE_RATE,
};
use lucent::io::mel::{MelStream, N_FRAMES};

fn data(path: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/../../tests/data/whisper/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

/// A fresh temporary folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lucent-audio-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn clip_i16() -> Vec<i16> {
    let mut r = hound::WavReader::open(data("clips/00.wav")).unwrap();
    assert_eq!(r.spec().sample_rate, 16_000);
    r.samples::<i16>().map(|s| s.unwrap()).collect()
}

fn spec(rate: u32, channels: u16, bits: u16, float: bool) -> hound::WavSpec {
    hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: if float {
            hound::SampleFormat::Float
        } else {
            hound::SampleFormat::Int
        },
    }
}

/// Write interleaved samples; `int` maps an i16 value to the stored integer.
fn write_int(path: &Path, s: hound::WavSpec, samples: &[i16], int: impl Fn(i16) -> i32) {
    let mut w = hound::WavWriter::create(path, s).unwrap();
    for &x in samples {
        w.write_sample(int(x)).unwrap();
    }
    w.finalize().unwrap();
}

#[test]
fn reads_every_common_form() {
    let dir = temp_dir("forms");
    let clip = clip_i16();
    let want: Vec<f32> = clip.iter().map(|&x| f32::from(x) / 32768.0).collect();
    let exact = [
        ("16", spec(16_000, 1, 16, false), 0),
        ("24", spec(16_000, 1, 24, false), 8),
        ("32", spec(16_000, 1, 32, false), 16),
    ];
    for (name, s, shift) in exact {
        let path = dir.join(format!("int{name}.wav"));
        write_int(&path, s, &clip, |x| i32::from(x) << shift);
        let stream = AudioStream::open(&path).unwrap();
        assert_eq!(stream.info().format, SampleFormat::Int(s.bits_per_sample));
        assert_eq!(stream.info().frames, clip.len() as u64);
        assert_eq!(read_16k(&path).unwrap(), want, "{name}-bit");
    }
    // 32-bit float.
    let path = dir.join("float.wav");
    let mut w = hound::WavWriter::create(&path, spec(16_000, 1, 32, true)).unwrap();
    for &x in &want {
        w.write_sample(x).unwrap();
    }
    w.finalize().unwrap();
    assert_eq!(read_16k(&path).unwrap(), want, "float");
    // 8-bit (unsigned in the file): the top byte of each sample.
    let path = dir.join("int8.wav");
    write_int(&path, spec(16_000, 1, 8, false), &clip, |x| {
        i32::from(x >> 8)
    });
    let got = read_16k(&path).unwrap();
    let want8: Vec<f32> = clip.iter().map(|&x| f32::from(x >> 8) / 128.0).collect();
    assert_eq!(got, want8, "8-bit");
    // Stereo: the mean of the channels (here left = x, right = x / 2 rounded down).
    let path = dir.join("stereo.wav");
    let interleaved: Vec<i16> = clip.iter().flat_map(|&x| [x, x >> 1]).collect();
    write_int(&path, spec(16_000, 2, 16, false), &interleaved, i32::from);
    let got = read_16k(&path).unwrap();
    let want2: Vec<f32> = clip
        .iter()
        .map(|&x| (f32::from(x) / 32768.0 + f32::from(x >> 1) / 32768.0) / 2.0)
        .collect();
    assert_eq!(got, want2, "stereo");
    let _ = std::fs::remove_dir_all(&dir);
}

fn sine(rate: u32, hz: f64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            (0.5 * (2.0 * std::f64::consts::PI * hz * i as f64 / f64::from(rate)).sin()) as f32
        })
        .collect()
}

/// Sines resampled to 16 kHz against the same sine computed at 16 kHz, away from the
/// abrupt start and end (two resampler blocks at each side).
#[test]
fn resampler_accuracy() {
    let here = Path::new("sine");
    let mut report = Vec::new();
    for rate in [8_000u32, 11_025, 22_050, 32_000, 44_100, 48_000] {
        let (block_in, block_out) = resampler_blocks(rate);
        assert_eq!(block_in % 2, 0);
        assert_eq!(block_in as u64 * 16_000, block_out as u64 * u64::from(rate));
        for hz in [101.3, 997.7, 3011.9, 5987.3, 7023.1] {
            if hz >= f64::from(rate) / 2.0 * 0.9 {
                continue;
            }
            let n = rate as usize * 2 + 123;
            let out = resample_to_16k(here, &sine(rate, hz, n), rate).unwrap();
            let expected_len = (n as u64 * 16_000).div_ceil(u64::from(rate)) as usize;
            assert_eq!(out.len(), expected_len, "{rate} Hz");
            let want = sine(16_000, hz, out.len());
            let edge = 2 * block_out;
            let err = out[edge..out.len() - edge]
                .iter()
                .zip(&want[edge..])
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            report.push(format!("{rate} Hz, {hz} Hz sine: max |Δ| {err:.1e}"));
            // The pass band is flat to the rounding of f32 (measured: 3e-8 everywhere).
            assert!(err <= 1e-6, "{rate} Hz, {hz} Hz: max |Δ| = {err}");
        }
    }
    // Above 8 kHz nothing may come through (it would fold back below 8 kHz).
    for (rate, hz) in [
        (44_100u32, 9_000.0),
        (44_100, 15_000.0),
        (48_000, 12_345.6),
        (22_050, 9_500.0),
    ] {
        let n = rate as usize * 2;
        let out = resample_to_16k(here, &sine(rate, hz, n), rate).unwrap();
        let edge = 2 * resampler_blocks(rate).1;
        let leak = out[edge..out.len() - edge]
            .iter()
            .fold(0.0f32, |m, x| m.max(x.abs()));
        report.push(format!(
            "{rate} Hz, {hz} Hz sine (above 8 kHz): leaks {leak:.1e}"
        ));
        assert!(leak <= 1e-4, "{rate} Hz, {hz} Hz: {leak} leaks through");
    }
    println!("{}", report.join("\n"));
    // 16 kHz passes through untouched.
    let x = sine(16_000, 440.0, 5000);
    assert_eq!(resample_to_16k(here, &x, SAMPLE_RATE).unwrap(), x);
}

/// A WAV read in chunks gives the same samples as the whole signal resampled at once.
#[test]
fn streamed_resampling_equals_in_memory() {
    let dir = temp_dir("stream");
    let clip = clip_i16();
    // The clip at 44.1 kHz (upsampled by repetition: any signal will do), 1.6 MB.
    let up: Vec<i16> = clip
        .iter()
        .flat_map(|&x| [x; 3])
        .take(clip.len() * 3 - 17)
        .collect();
    let path = dir.join("44k.wav");
    write_int(&path, spec(44_100, 1, 16, false), &up, i32::from);
    let mut stream = AudioStream::open(&path).unwrap();
    let mut chunks = 0;
    let mut streamed = Vec::new();
    while let Some(c) = stream.next_chunk().unwrap() {
        chunks += 1;
        streamed.extend(c);
    }
    assert!(chunks > 1);
    let x: Vec<f32> = up.iter().map(|&v| f32::from(v) / 32768.0).collect();
    let whole = resample_to_16k(&path, &x, 44_100).unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(streamed.len() as u64, stream.info().frames_16k());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Write `bytes` as a file and open it; the error's text.
fn open_err(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let err = match AudioStream::open(&path) {
        Ok(mut s) => loop {
            match s.next_chunk() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{name}: read without an error"),
                Err(e) => break e.to_string(),
            }
        },
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(name),
        "{name}: the error does not name the file: {err}"
    );
    err
}

/// A canonical 44-byte WAV header.
fn header(format: u16, channels: u16, rate: u32, bits: u16, data_len: u32) -> Vec<u8> {
    let block = channels * bits.div_ceil(8);
    let mut h = Vec::new();
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&(36u32.wrapping_add(data_len)).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&format.to_le_bytes());
    h.extend_from_slice(&channels.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
    h.extend_from_slice(&block.to_le_bytes());
    h.extend_from_slice(&bits.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_len.to_le_bytes());
    h
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = temp_dir("bad");
    let pcm: Vec<u8> = (0..2000u32)
        .flat_map(|i| ((i * 37 % 2000) as i16).to_le_bytes())
        .collect();
    let mut good = header(1, 1, 16_000, 16, pcm.len() as u32);
    good.extend_from_slice(&pcm);

    let e = open_err(
        &dir,
        "text.wav",
        b"this is not audio at all, just some text\n",
    );
    assert!(
        e.contains("not a readable WAV") && e.contains("RIFF"),
        "{e}"
    );
    let e = open_err(&dir, "empty.wav", b"");
    assert!(e.contains("truncated"), "{e}");
    let e = open_err(&dir, "header-cut.wav", &good[..30]);
    assert!(e.contains("truncated"), "{e}");
    let e = open_err(&dir, "data-cut.wav", &good[..good.len() - 1000]);
    assert!(e.contains("truncated") && e.contains("claims"), "{e}");
    let e = open_err(&dir, "zero.wav", &header(1, 1, 16_000, 16, 0));
    assert!(e.contains("no audio samples"), "{e}");
    // A header claiming 2^32 - 2 bytes (2^31 - 1 samples) over 4 KB of audio: refused
    // before anything is read or allocated.
    let mut huge = header(1, 1, 16_000, 16, u32::MAX - 1);
    huge.extend_from_slice(&pcm);
    let e = open_err(&dir, "huge.wav", &huge);
    assert!(
        e.contains("claims 2147483647 frames") && e.contains("truncated"),
        "{e}"
    );
    for (tag, what) in [(2u16, "adpcm"), (6, "alaw"), (7, "mulaw"), (0x55, "mp3")] {
        let mut h = header(tag, 1, 16_000, 16, pcm.len() as u32);
        h.extend_from_slice(&pcm);
        let e = open_err(&dir, &format!("{what}.wav"), &h);
        assert!(
            e.contains("unsupported WAV format") && e.contains("convert"),
            "{what}: {e}"
        );
    }
    let mut f64_wav = header(3, 1, 16_000, 64, pcm.len() as u32);
    f64_wav.extend_from_slice(&pcm);
    let e = open_err(&dir, "f64.wav", &f64_wav);
    assert!(e.contains("WAV"), "{e}");
    let mut three = header(1, 3, 16_000, 16, 1200);
    three.extend_from_slice(&pcm[..1200]);
    let e = open_err(&dir, "three.wav", &three);
    assert!(e.contains("3 channels"), "{e}");
    let mut slow = header(1, 1, 1_000, 16, pcm.len() as u32);
    slow.extend_from_slice(&pcm);
    let e = open_err(&dir, "slow.wav", &slow);
    assert!(e.contains("sample rate 1000 Hz"), "{e}");
    let mut nan = header(3, 1, 16_000, 32, 16);
    for x in [0.5f32, f32::NAN, 0.1, 0.2] {
        nan.extend_from_slice(&x.to_le_bytes());
    }
    let e = open_err(&dir, "nan.wav", &nan);
    assert!(e.contains("NaN"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Random corruptions of a small WAV: every one opens and reads to an `Ok` or an `Err`,
/// never a panic.
#[test]
fn corrupted_headers_never_panic() {
    let dir = temp_dir("fuzz");
    let pcm: Vec<u8> = (0..600u32)
        .flat_map(|i| ((i * 91 % 3000) as i16).to_le_bytes())
        .collect();
    let mut good = header(1, 2, 22_050, 16, pcm.len() as u32);
    good.extend_from_slice(&pcm);
    let path = dir.join("fuzz.wav");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut errors = 0;
    for _ in 0..1500 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % 48) as usize;
            bytes[at] = next() as u8;
        }
        if next() % 5 == 0 {
            bytes.truncate((next() % bytes.len() as u64) as usize);
        }
        std::fs::write(&path, &bytes).unwrap();
        let result = AudioStream::open(&path).and_then(|mut s| {
            let mut n = 0usize;
            while let Some(c) = s.next_chunk()? {
                n += c.len();
            }
            Ok(n)
        });
        if result.is_err() {
            errors += 1;
        }
    }
    assert!(errors > 100, "only {errors} corruptions were refused");
    let _ = std::fs::remove_dir_all(&dir);
}

fn resident_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One hour of 8 kHz 8-bit audio (a 29 MB file; 230 MB as 16 kHz f32) through both
/// passes of the log-mel front-end: 120 windows, and the process grows by far less than
/// the decoded audio would take.
#[test]
fn an_hour_streams_in_bounded_memory() {
    let dir = temp_dir("hour");
    let path = dir.join("hour.wav");
    let rate = 8_000u32;
    let frames = 3600 * rate as usize;
    {
        let mut w = hound::WavWriter::create(&path, spec(rate, 1, 8, false)).unwrap();
        for i in 0..frames {
            // A tone whose pitch and loudness wander, and a click every 7.3 s.
            let t = i as f64 / f64::from(rate);
            let x = (0.3 + 0.2 * (t / 100.0).sin())
                * (2.0 * std::f64::consts::PI * (300.0 + 50.0 * (t / 13.0).sin()) * t).sin();
            let click = if i % 58_400 < 8 { 0.6 } else { 0.0 };
            w.write_sample(((x + click).clamp(-1.0, 0.99) * 127.0) as i8)
                .unwrap();
        }
        w.finalize().unwrap();
    }
    let before = resident_kb();
    let mut stream = MelStream::open_wav(&path, 80).unwrap();
    let mut windows = 0;
    let mut peak = before;
    let mut last_frames = 0;
    for w in stream.by_ref() {
        let w = w.unwrap();
        assert_eq!(w.seek, windows * N_FRAMES);
        assert!(w.features.data().iter().all(|v| v.is_finite()));
        last_frames = w.frames;
        windows += 1;
        peak = match (peak, resident_kb()) {
            (Some(p), Some(now)) => Some(p.max(now)),
            _ => None,
        };
    }
    assert_eq!(windows, 120);
    assert_eq!(last_frames, N_FRAMES);
    assert_eq!(stream.content_frames(), Some(360_000));
    if let (Some(before), Some(peak)) = (before, peak) {
        let grown_mb = (peak.saturating_sub(before)) as f64 / 1024.0;
        println!("an hour of audio: resident memory grew by {grown_mb:.1} MB");
        assert!(grown_mb < 64.0, "grew by {grown_mb} MB");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
