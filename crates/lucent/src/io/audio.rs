//! Audio files in: a WAV file in any common form, as 16 kHz mono samples in `[-1, 1]`,
//! streamed chunk by chunk so that an hour of audio goes through in bounded memory.
//!
//! Whisper hears 16 kHz mono. [`AudioStream`] reads a WAV file with `hound` (PCM
//! integers of 8, 16, 24 or 32 bits, or 32-bit float; mono or stereo; 4–192 kHz, the
//! common rates being 8–48 kHz), scales integers to `[-1, 1)` (`x / 2^(bits-1)`, so a
//! 16-bit file gives exactly the samples of Whisper's own loader, `int16 / 32768`),
//! averages the channels (the down-mix Whisper's loader, ffmpeg `-ac 1`, makes of a
//! stereo file) and resamples to 16 kHz with `rubato`. It yields chunks of at most
//! [`CHUNK_FRAMES`] input frames' worth of output, so memory stays a few hundred KB
//! whatever the file's length ([`read_16k`] collects a whole (short) file).
//!
//! # Resampling
//!
//! `rubato::Fft` (synchronous, fixed ratio), in f64: each block of the input is
//! transformed, its spectrum cut to the output's band by a Blackman-Harris² anti-aliasing
//! filter (cut-off about 7.9 kHz) and transformed back; blocks overlap and add. The blocks
//! are about [`RESAMPLER_BLOCK`] input frames, always of even length
//! ([`resampler_blocks`]: rubato 5 is half an input sample early with odd blocks). The
//! resampler's delay (half an output block) is removed, so output sample `j` is the
//! input at time `j / 16000` s, and `n` frames at rate `r` give `ceil(n · 16000 / r)`
//! samples. Measured (tests/audio.rs, `resampler_accuracy`): sines from 100 Hz to 7 kHz
//! come through 8, 11.025, 22.05, 32, 44.1 and 48 kHz within 3e-8 (f32 rounding), sines
//! above 8 kHz leak less than 2e-8, and a 16 kHz file passes through untouched. On
//! speech (tests/whisper_mel.rs) it is as close to an ideal band-limited resampler as
//! ffmpeg's (Whisper's loader): rms 1.5e-3 against ffmpeg's 1.6e-3, for a peak of 0.33.
//!
//! # Errors
//!
//! Every bad input is an [`Error`] naming the file: not a WAV (`no RIFF tag`), a codec
//! other than PCM / IEEE float (`unsupported format: ... ADPCM, µ-law, MP3 ... convert it
//! to PCM`), more than two channels, a rate outside 4–192 kHz, no samples, a data chunk
//! claiming more bytes than the file holds (a truncated file, or a header claiming 2³²
//! samples: refused before reading, so nothing is allocated for it), a read that ends
//! early, a non-finite float sample.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler, WindowFunction};

use crate::{Error, Result};

/// The sample rate Whisper hears.
pub const SAMPLE_RATE: u32 = 16_000;

/// The lowest sample rate lucent reads.
pub const MIN_RATE: u32 = 4_000;

/// The highest sample rate lucent reads.
pub const MAX_RATE: u32 = 192_000;

/// Input frames read from the file per chunk.
pub const CHUNK_FRAMES: usize = 16_384;

/// The resampler's block length in input frames (a hint, see the module doc).
pub const RESAMPLER_BLOCK: usize = 2_048;

/// How a WAV file stores its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleFormat {
    /// Signed PCM integers (unsigned for 8 bits) of this many bits.
    Int(u16),
    /// IEEE 754 single-precision floats.
    Float32,
}

/// What a WAV header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WavInfo {
    /// Frames per second.
    pub sample_rate: u32,
    /// Channels (1 or 2).
    pub channels: u16,
    /// Sample encoding.
    pub format: SampleFormat,
    /// Frames (samples per channel) in the data chunk.
    pub frames: u64,
}

impl WavInfo {
    /// The length in seconds.
    pub fn duration_secs(&self) -> f64 {
        self.frames as f64 / f64::from(self.sample_rate)
    }

    /// The number of 16 kHz samples this file becomes: `ceil(frames · 16000 / rate)`.
    pub fn frames_16k(&self) -> u64 {
        resampled_len(self.frames, self.sample_rate)
    }
}

fn resampled_len(frames: u64, rate: u32) -> u64 {
    (u128::from(frames) * u128::from(SAMPLE_RATE)).div_ceil(u128::from(rate)) as u64
}

/// Counts the bytes `hound` takes, to find where the data chunk starts.
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

type Wav = hound::WavReader<Counting<BufReader<File>>>;

fn hound_error(path: &Path, e: hound::Error) -> Error {
    match e {
        // hound reports a short read as `Other` with this text.
        hound::Error::IoError(io)
            if io.kind() == std::io::ErrorKind::UnexpectedEof
                || io.to_string().contains("read enough bytes") =>
        {
            Error::format(
                path,
                "the WAV file ends in the middle of its header or data (truncated); re-create it",
            )
        }
        hound::Error::IoError(io) => Error::io(path, io),
        hound::Error::FormatError(msg) => Error::format(
            path,
            format!("not a readable WAV file ({msg}); lucent reads RIFF/WAVE files with PCM or float samples"),
        ),
        hound::Error::Unsupported => Error::format(
            path,
            "unsupported WAV format: lucent reads PCM integers (8/16/24/32-bit) and 32-bit float, not ADPCM, µ-law, A-law, MP3 or 64-bit float; convert it (e.g. `sox IN -b 16 OUT.wav` or `ffmpeg -i IN -c:a pcm_s16le OUT.wav`)",
        ),
        other => Error::format(path, format!("cannot read the WAV samples: {other}")),
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The resampler's FFT block lengths `(input, output)` for `rate` → 16 kHz: the smallest
/// even multiple of the minimal pair `(rate, 16000) / gcd` that reaches
/// [`RESAMPLER_BLOCK`] input frames. Even, because rubato 5's `Fft` puts its output half
/// an input sample early when its input block is odd (measured: 0.36 output samples at
/// 22.05 kHz with blocks of 2205 → 1600, a 30 % error at 3 kHz).
pub fn resampler_blocks(rate: u32) -> (usize, usize) {
    let g = gcd(rate, SAMPLE_RATE);
    let (min_in, min_out) = ((rate / g) as usize, (SAMPLE_RATE / g) as usize);
    let mut n = RESAMPLER_BLOCK.div_ceil(min_in).max(1);
    if n % 2 == 1 {
        n += 1;
    }
    (n * min_in, n * min_out)
}

/// The resampler to 16 kHz, fed mono chunks of any length (see the module doc).
struct ToSixteen {
    fft: Fft<f64>,
    /// Input not yet processed (mono).
    pending: Vec<f64>,
    /// Output scratch, `output_frames_max` long.
    scratch: Vec<f64>,
    /// Output frames still to drop (the resampler's delay).
    to_trim: usize,
    rate: u32,
    /// Input frames received.
    consumed: u64,
    /// Output frames given out.
    produced: u64,
}

impl ToSixteen {
    fn new(path: &Path, rate: u32) -> Result<Self> {
        let (block_in, _) = resampler_blocks(rate);
        // Four blocks per chunk; rubato rounds `chunk / 4` up to whole minimal blocks,
        // which `block_in` already is.
        let chunk = 4 * block_in;
        let fft = Fft::<f64>::new_custom(
            rate as usize,
            SAMPLE_RATE as usize,
            chunk,
            4,
            1,
            WindowFunction::BlackmanHarris2,
            FixedSync::Input,
        )
        .map_err(|e| Error::format(path, format!("cannot resample {rate} Hz to 16 kHz: {e}")))?;
        let scratch = vec![0.0; fft.output_frames_max()];
        let to_trim = fft.output_delay();
        Ok(ToSixteen {
            fft,
            pending: Vec::with_capacity(2 * chunk),
            scratch,
            to_trim,
            rate,
            consumed: 0,
            produced: 0,
        })
    }

    /// Run one chunk (`partial`: the last, shorter one, or `Some(0)` to pump zeros).
    fn run(&mut self, path: &Path, partial: Option<usize>, out: &mut Vec<f32>) -> Result<usize> {
        let need = self.fft.input_frames_next();
        let have = partial.unwrap_or(need);
        if self.pending.len() < need {
            // rubato reads only `partial_len` frames but wants a full-length buffer.
            self.pending.resize(need, 0.0);
        }
        let adapter_in = InterleavedSlice::new(&self.pending[..need], 1, need)
            .map_err(|e| Error::format(path, format!("resampler input: {e}")))?;
        let frames = self.scratch.len();
        let mut adapter_out = InterleavedSlice::new_mut(&mut self.scratch, 1, frames)
            .map_err(|e| Error::format(path, format!("resampler output: {e}")))?;
        let indexing = Indexing {
            partial_len: partial,
            ..Indexing::default()
        };
        let (_, written) = self
            .fft
            .process_into_buffer(&adapter_in, &mut adapter_out, Some(&indexing))
            .map_err(|e| Error::format(path, format!("resampling failed: {e}")))?;
        let trim = self.to_trim.min(written);
        self.to_trim -= trim;
        out.extend(self.scratch[trim..written].iter().map(|&x| x as f32));
        self.produced += (written - trim) as u64;
        if partial.is_some() {
            self.pending.clear();
        } else {
            self.pending.drain(..have);
        }
        Ok(have)
    }

    /// Resample `samples` (plus what is pending) as far as whole chunks allow.
    fn push(&mut self, path: &Path, samples: &[f32], out: &mut Vec<f32>) -> Result<()> {
        self.pending.extend(samples.iter().map(|&x| f64::from(x)));
        self.consumed += samples.len() as u64;
        while self.pending.len() >= self.fft.input_frames_next() {
            self.run(path, None, out)?;
        }
        Ok(())
    }

    /// Flush: the last partial chunk, then zeros until every output sample is out.
    fn finish(&mut self, path: &Path, out: &mut Vec<f32>) -> Result<()> {
        let expected = resampled_len(self.consumed, self.rate);
        let start = out.len();
        if !self.pending.is_empty() {
            let n = self.pending.len();
            self.run(path, Some(n), out)?;
        }
        // Each pumped chunk gives at least one output block; a few are enough.
        let mut guard = 0;
        while self.produced < expected {
            self.run(path, Some(0), out)?;
            guard += 1;
            if guard > 64 {
                return Err(Error::format(path, "the resampler did not finish"));
            }
        }
        let extra = (self.produced - expected) as usize;
        out.truncate(out.len() - extra.min(out.len() - start));
        self.produced = expected;
        Ok(())
    }
}

/// A WAV file read as 16 kHz mono chunks (an iterator of `Result<Vec<f32>>`).
///
/// # Shapes
/// Each chunk: `(n)` samples at 16 kHz, `n ≤ ceil(CHUNK_FRAMES · 16000 / rate) + one
/// resampler block`; all chunks together: [`WavInfo::frames_16k`] samples.
pub struct AudioStream {
    path: PathBuf,
    info: WavInfo,
    reader: Wav,
    frames_left: u64,
    resampler: Option<ToSixteen>,
    done: bool,
}

impl std::fmt::Debug for AudioStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AudioStream")
            .field("path", &self.path)
            .field("info", &self.info)
            .field("frames_left", &self.frames_left)
            .finish()
    }
}

impl AudioStream {
    /// Open `path` and check its header against the file (see the module doc's errors).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        let read = Arc::new(AtomicU64::new(0));
        let counting = Counting {
            inner: BufReader::new(file),
            read: read.clone(),
        };
        let reader = hound::WavReader::new(counting).map_err(|e| hound_error(&path, e))?;
        let spec = reader.spec();
        let data_start = read.load(Ordering::Relaxed);
        let format = match spec.sample_format {
            hound::SampleFormat::Float => SampleFormat::Float32,
            hound::SampleFormat::Int => SampleFormat::Int(spec.bits_per_sample),
        };
        if let SampleFormat::Int(bits) = format {
            if !(8..=32).contains(&bits) {
                return Err(Error::format(
                    &path,
                    format!("{bits}-bit integer samples: lucent reads 8 to 32 bits"),
                ));
            }
        }
        if spec.channels > 2 {
            return Err(Error::format(
                &path,
                format!(
                    "{} channels: lucent reads mono or stereo; down-mix it first (e.g. `sox IN.wav -c 1 OUT.wav`)",
                    spec.channels
                ),
            ));
        }
        if !(MIN_RATE..=MAX_RATE).contains(&spec.sample_rate) {
            return Err(Error::format(
                &path,
                format!(
                    "sample rate {} Hz: lucent reads {MIN_RATE}–{MAX_RATE} Hz",
                    spec.sample_rate
                ),
            ));
        }
        let samples = u64::from(reader.len());
        let frames = samples / u64::from(spec.channels);
        let bytes_per_sample = u64::from(spec.bits_per_sample.div_ceil(8));
        let claimed = samples * bytes_per_sample;
        let available = file_len.saturating_sub(data_start);
        if claimed > available {
            return Err(Error::format(
                &path,
                format!(
                    "the header claims {frames} frames ({claimed} bytes of audio, {:.1} s) but only {available} bytes follow it: the file is truncated or its header is wrong",
                    frames as f64 / f64::from(spec.sample_rate)
                ),
            ));
        }
        if frames == 0 {
            return Err(Error::format(&path, "the WAV file holds no audio samples"));
        }
        let info = WavInfo {
            sample_rate: spec.sample_rate,
            channels: spec.channels,
            format,
            frames,
        };
        let resampler = if spec.sample_rate == SAMPLE_RATE {
            None
        } else {
            Some(ToSixteen::new(&path, spec.sample_rate)?)
        };
        Ok(AudioStream {
            path,
            info,
            reader,
            frames_left: frames,
            resampler,
            done: false,
        })
    }

    /// What the header says.
    pub fn info(&self) -> &WavInfo {
        &self.info
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read up to `n` frames, down-mixed to mono, scaled to `[-1, 1]`.
    fn read_mono(&mut self, n: usize) -> Result<Vec<f32>> {
        let channels = usize::from(self.info.channels);
        let mut mono = Vec::with_capacity(n);
        let path = &self.path;
        let bad = |e| hound_error(path, e);
        match self.info.format {
            SampleFormat::Float32 => {
                let mut it = self.reader.samples::<f32>();
                for _ in 0..n {
                    let mut sum = 0.0f32;
                    for _ in 0..channels {
                        let x = it.next().ok_or_else(|| early_end(path))?.map_err(bad)?;
                        if !x.is_finite() {
                            return Err(Error::format(
                                path,
                                format!("a float sample is {x}; the file is corrupt"),
                            ));
                        }
                        sum += x;
                    }
                    mono.push(sum / channels as f32);
                }
            }
            SampleFormat::Int(bits) => {
                let scale = 1.0 / (1u64 << (bits - 1)) as f32;
                let mut it = self.reader.samples::<i32>();
                for _ in 0..n {
                    let mut sum = 0.0f32;
                    for _ in 0..channels {
                        let x = it.next().ok_or_else(|| early_end(path))?.map_err(bad)?;
                        sum += x as f32 * scale;
                    }
                    mono.push(sum / channels as f32);
                }
            }
        }
        self.frames_left -= n as u64;
        Ok(mono)
    }

    /// The next chunk of 16 kHz mono samples, `None` at the end of the file.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<f32>>> {
        let mut out = Vec::new();
        while out.is_empty() && !self.done {
            let n = self.frames_left.min(CHUNK_FRAMES as u64) as usize;
            let mono = if n > 0 {
                self.read_mono(n)?
            } else {
                Vec::new()
            };
            match self.resampler.as_mut() {
                None => out = mono,
                Some(r) => {
                    r.push(&self.path, &mono, &mut out)?;
                    if self.frames_left == 0 {
                        r.finish(&self.path, &mut out)?;
                    }
                }
            }
            if self.frames_left == 0 {
                self.done = true;
            }
        }
        Ok(if out.is_empty() { None } else { Some(out) })
    }
}

fn early_end(path: &Path) -> Error {
    Error::format(
        path,
        "the WAV data ends before the length its header gives (truncated)",
    )
}

impl Iterator for AudioStream {
    type Item = Result<Vec<f32>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_chunk() {
            Ok(Some(chunk)) => Some(Ok(chunk)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A whole WAV file as 16 kHz mono samples (for short files: an hour is 230 MB; stream
/// long ones with [`AudioStream`]).
pub fn read_16k(path: impl AsRef<Path>) -> Result<Vec<f32>> {
    let mut stream = AudioStream::open(path)?;
    let mut all = Vec::with_capacity(stream.info().frames_16k() as usize);
    while let Some(chunk) = stream.next_chunk()? {
        all.extend_from_slice(&chunk);
    }
    Ok(all)
}

/// Resample mono samples at `rate` to 16 kHz in memory, exactly as [`AudioStream`] does
/// (`path` only names the source in errors).
pub fn resample_to_16k(path: &Path, samples: &[f32], rate: u32) -> Result<Vec<f32>> {
    if rate == SAMPLE_RATE {
        return Ok(samples.to_vec());
    }
    if !(MIN_RATE..=MAX_RATE).contains(&rate) {
        return Err(Error::Argument(format!(
            "sample rate {rate} Hz: lucent resamples {MIN_RATE}–{MAX_RATE} Hz"
        )));
    }
    let mut r = ToSixteen::new(path, rate)?;
    let mut out = Vec::with_capacity(resampled_len(samples.len() as u64, rate) as usize);
    for chunk in samples.chunks(CHUNK_FRAMES) {
        r.push(path, chunk, &mut out)?;
    }
    r.finish(path, &mut out)?;
    Ok(out)
}
