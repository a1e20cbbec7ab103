//! Whisper's log-mel spectrogram: the features its encoder reads, made from 16 kHz mono
//! samples exactly as `whisper.audio.log_mel_spectrogram` makes them.
//!
//! It lives in `io`, beside the tokenizer, because it is the audio side of the same step:
//! a fixed, weightless transformation of the user's input into what the model reads
//! (text → token ids, audio → mel frames). The model layer only checks that the number
//! of mel bins matches its first convolution; the transcribe pipeline drives the windows.
//!
//! # The formula
//!
//! For samples `x` (16 kHz, with `padding` zeros appended: Whisper's transcriber appends
//! 30 s, [`N_SAMPLES`]):
//!
//! 1. reflect-pad by `N_FFT / 2` = 200 samples at both ends (`x[200], ..., x[1]` before,
//!    `x[L-2], ..., x[L-201]` after), as `torch.stft(center=True)` does;
//! 2. frame `t` is the 400 samples from `t · 160` of the padded signal, times a periodic
//!    Hann window `w[n] = 0.5 − 0.5 cos(2πn / 400)`;
//! 3. its power spectrum `|FFT(frame)|²`, 201 bins (`realfft`); the last frame is
//!    dropped, so `L` samples give `⌊L / 160⌋` frames;
//! 4. mel power: `M = filters · power` with Slaney-style mel filters ([`mel_filters`]:
//!    80 bins, or 128 for the large-v3 models);
//! 5. `log10(max(M, 1e-10))`, floored at (the maximum over **all** frames) − 8, then
//!    `(v + 4) / 4`.
//!
//! The transcriber then cuts 30-second windows of [`N_FRAMES`] = 3000 frames at a
//! position `seek` (in frames): the frames of audio (`⌊samples / 160⌋` of them in all)
//! from `seek`, followed by **zeros** where the audio ends (`pad_or_trim` of the cut
//! frames), not by the log-mel of silence.
//!
//! # Streaming
//!
//! Step 5's maximum runs over the whole file, so [`MelStream`] reads the audio twice: a
//! first pass keeps only the running maximum ([`MelSpectrogram::max_log_mel`]), the second
//! computes frames as windows need them, keeping at most one window of frames plus one
//! chunk of samples. An hour of audio goes through in a few MB, and every window equals
//! the in-memory [`MelSpectrogram::log_mel_spectrogram`] cut (tests/audio.rs).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

use crate::io::audio::{AudioStream, SAMPLE_RATE};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// FFT length (25 ms at 16 kHz).
pub const N_FFT: usize = 400;
/// Samples between frames (10 ms).
pub const HOP_LENGTH: usize = 160;
/// Frequency bins of one frame's spectrum.
pub const N_FREQS: usize = N_FFT / 2 + 1;
/// Seconds in one window.
pub const CHUNK_SECONDS: usize = 30;
/// Samples in one window (30 s at 16 kHz).
pub const N_SAMPLES: usize = CHUNK_SECONDS * SAMPLE_RATE as usize;
/// Frames in one window.
pub const N_FRAMES: usize = N_SAMPLES / HOP_LENGTH;
/// The floor under the mel power before the log.
pub const POWER_FLOOR: f32 = 1e-10;
/// How far below the loudest frame the log-mel is floored (in log10 units: 80 dB).
pub const DYNAMIC_RANGE: f32 = 8.0;

/// Hertz to mels on the Slaney scale (librosa's default, `htk=False`): linear below
/// 1 kHz (`f / (200/3)`), logarithmic above (`15 + ln(f / 1000) / (ln 6.4 / 27)`).
pub fn hz_to_mel(hz: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if hz >= min_log_hz {
        min_log_mel + (hz / min_log_hz).ln() / logstep
    } else {
        hz / f_sp
    }
}

/// Mels to hertz on the Slaney scale (the inverse of [`hz_to_mel`]).
pub fn mel_to_hz(mel: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= min_log_mel {
        min_log_hz * (logstep * (mel - min_log_mel)).exp()
    } else {
        f_sp * mel
    }
}

/// The mel filter bank, as `librosa.filters.mel(sr, n_fft, n_mels)` makes it (and
/// Whisper's `mel_filters.npz` stores it): `n_mels` triangles whose corners are
/// `n_mels + 2` points evenly spaced in mels from 0 to `sr / 2`, each scaled by
/// `2 / (right − left corner in Hz)` so that every filter has the same area (Slaney
/// normalisation). Computed in f64, returned as f32.
///
/// # Shapes
/// Result: `(n_mels, n_fft / 2 + 1)`, row-major.
pub fn mel_filters(sample_rate: u32, n_fft: usize, n_mels: usize) -> Result<Vec<f32>> {
    if n_mels == 0 || n_fft < 2 || sample_rate == 0 {
        return Err(Error::Argument(format!(
            "mel filters need n_mels ≥ 1, n_fft ≥ 2 and a sample rate (got {n_mels}, {n_fft}, {sample_rate})"
        )));
    }
    let n_freqs = n_fft / 2 + 1;
    let fmax = f64::from(sample_rate) / 2.0;
    let fft_freqs: Vec<f64> = (0..n_freqs)
        .map(|k| k as f64 * f64::from(sample_rate) / n_fft as f64)
        .collect();
    let (mel_lo, mel_hi) = (hz_to_mel(0.0), hz_to_mel(fmax));
    let corners: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(mel_lo + (mel_hi - mel_lo) * i as f64 / (n_mels + 1) as f64))
        .collect();
    let mut weights = vec![0f32; n_mels * n_freqs];
    for m in 0..n_mels {
        let (left, center, right) = (corners[m], corners[m + 1], corners[m + 2]);
        let norm = 2.0 / (right - left);
        for (k, &f) in fft_freqs.iter().enumerate() {
            let lower = (f - left) / (center - left);
            let upper = (right - f) / (right - center);
            let w = lower.min(upper).max(0.0);
            weights[m * n_freqs + k] = (w * norm) as f32;
        }
    }
    Ok(weights)
}

/// The periodic Hann window of length `n` (`torch.hann_window(n)`):
/// `w[i] = 0.5 − 0.5 cos(2π i / n)`.
pub fn hann_window(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos()) as f32)
        .collect()
}

/// Whisper's log-mel front-end for a given number of mel bins (see the module doc).
#[derive(Clone)]
pub struct MelSpectrogram {
    n_mels: usize,
    /// (n_mels, N_FREQS)
    filters: Vec<f32>,
    /// Per filter, the range of bins where its weight is not zero.
    bands: Vec<std::ops::Range<usize>>,
    window: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
}

impl std::fmt::Debug for MelSpectrogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MelSpectrogram")
            .field("n_mels", &self.n_mels)
            .finish()
    }
}

/// Per-frame working memory of a [`MelSpectrogram`].
struct Scratch {
    frame: Vec<f32>,
    spectrum: Vec<Complex<f32>>,
    fft: Vec<Complex<f32>>,
    power: Vec<f32>,
}

impl MelSpectrogram {
    /// The front-end with `n_mels` bins (Whisper's models use 80; large-v3 uses 128).
    pub fn new(n_mels: usize) -> Result<Self> {
        if n_mels == 0 || n_mels > 512 {
            return Err(Error::Argument(format!(
                "n_mels = {n_mels}: Whisper models use 80 or 128 mel bins"
            )));
        }
        let filters = mel_filters(SAMPLE_RATE, N_FFT, n_mels)?;
        let bands = filters
            .chunks_exact(N_FREQS)
            .map(|row| {
                let lo = row.iter().position(|&w| w != 0.0).unwrap_or(0);
                let hi = row.iter().rposition(|&w| w != 0.0).map_or(lo, |i| i + 1);
                lo..hi
            })
            .collect();
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(N_FFT);
        Ok(MelSpectrogram {
            n_mels,
            filters,
            bands,
            window: hann_window(N_FFT),
            fft,
        })
    }

    /// Number of mel bins.
    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// The filter bank, `(n_mels, 201)` row-major.
    pub fn filters(&self) -> &[f32] {
        &self.filters
    }

    fn scratch(&self) -> Scratch {
        Scratch {
            frame: self.fft.make_input_vec(),
            spectrum: self.fft.make_output_vec(),
            fft: self.fft.make_scratch_vec(),
            power: vec![0.0; N_FREQS],
        }
    }

    /// The mel power of one frame: `samples` are the frame's 400 padded samples; writes
    /// `n_mels` values to `out`.
    fn frame_power(&self, samples: &[f32], s: &mut Scratch, out: &mut [f32]) {
        for ((f, &x), &w) in s.frame.iter_mut().zip(samples).zip(&self.window) {
            *f = x * w;
        }
        // Lengths come from the plan itself, so the transform cannot fail.
        let _ = self
            .fft
            .process_with_scratch(&mut s.frame, &mut s.spectrum, &mut s.fft);
        for (p, c) in s.power.iter_mut().zip(&s.spectrum) {
            *p = c.re * c.re + c.im * c.im;
        }
        for (m, o) in out.iter_mut().enumerate() {
            let band = self.bands[m].clone();
            let row = &self.filters[m * N_FREQS..(m + 1) * N_FREQS];
            *o = row[band.clone()]
                .iter()
                .zip(&s.power[band])
                .map(|(w, p)| w * p)
                .sum();
        }
    }

    /// `whisper.audio.log_mel_spectrogram(audio, n_mels, padding)`, all in memory: the
    /// plain form of the computation, which [`MelStream`] equals window by window.
    ///
    /// # Shapes
    /// `audio`: `(n)` at 16 kHz; result: `(n_mels, ⌊(n + padding) / 160⌋)`.
    pub fn log_mel_spectrogram(&self, audio: &[f32], padding: usize) -> Result<Tensor> {
        let len = audio.len() + padding;
        let half = N_FFT / 2;
        if len <= half {
            return Err(Error::Argument(format!(
                "{} samples of audio (with {padding} of padding): the spectrogram needs more than {half}",
                audio.len()
            )));
        }
        let signal = |i: usize| audio.get(i).copied().unwrap_or(0.0);
        // (len + 2·half): reflect padding at both ends.
        let mut padded = Vec::with_capacity(len + 2 * half);
        padded.extend((1..=half).rev().map(signal));
        padded.extend((0..len).map(signal));
        padded.extend((0..half).map(|k| signal(len - 2 - k)));
        let frames = len / HOP_LENGTH;
        let mut power = vec![0f32; frames * self.n_mels]; // (frames, n_mels)
        let mut s = self.scratch();
        for (t, out) in power.chunks_exact_mut(self.n_mels).enumerate() {
            let start = t * HOP_LENGTH;
            self.frame_power(&padded[start..start + N_FFT], &mut s, out);
        }
        let max = power
            .iter()
            .map(|&p| log_power(p))
            .fold(f32::NEG_INFINITY, f32::max);
        let mut data = vec![0f32; self.n_mels * frames]; // (n_mels, frames)
        for t in 0..frames {
            for m in 0..self.n_mels {
                data[m * frames + t] = normalise(power[t * self.n_mels + m], max);
            }
        }
        Tensor::new(data, &[self.n_mels, frames])
    }

    /// The maximum of `log10(max(mel power, 1e-10))` over every frame of the audio that
    /// `source` gives, padded with [`N_SAMPLES`] zeros as Whisper's transcriber pads it:
    /// the first of [`MelStream`]'s two passes.
    pub fn max_log_mel<I>(&self, source: I) -> Result<f32>
    where
        I: Iterator<Item = Result<Vec<f32>>>,
    {
        let mut framer = Framer::new(self, source, false);
        // Frames wholly inside the zero padding have power 0: log10(1e-10) = -10.
        let mut max = log_power(0.0);
        while let Some(frame) = framer.next_frame(self)? {
            for &p in frame {
                max = max.max(log_power(p));
            }
        }
        Ok(max)
    }
}

fn log_power(p: f32) -> f32 {
    p.max(POWER_FLOOR).log10()
}

fn normalise(p: f32, max: f32) -> f32 {
    (log_power(p).max(max - DYNAMIC_RANGE) + 4.0) / 4.0
}

/// Cuts streamed audio, followed by Whisper's 30 s of zero padding, into frames and
/// computes their mel power, holding only the samples the next frames need.
struct Framer<I> {
    source: I,
    /// Samples from absolute index `buf_start`.
    buf: Vec<f32>,
    buf_start: usize,
    /// Samples received so far (the audio's length once `eof`).
    received: usize,
    eof: bool,
    /// The next frame's index.
    next: usize,
    /// Give only the frames of whole hops of audio (`⌊len / 160⌋`, the windows'
    /// frames), not also the frames that reach past the audio's end into the padding.
    content_only: bool,
    frame: Vec<f32>,
    power: Vec<f32>,
    scratch: Scratch,
}

impl<I> Framer<I>
where
    I: Iterator<Item = Result<Vec<f32>>>,
{
    fn new(mel: &MelSpectrogram, source: I, content_only: bool) -> Self {
        Framer {
            source,
            buf: Vec::new(),
            buf_start: 0,
            received: 0,
            eof: false,
            next: 0,
            content_only,
            frame: vec![0.0; N_FFT],
            power: vec![0.0; mel.n_mels],
            scratch: mel.scratch(),
        }
    }

    /// Sample `i` of the audio followed by zeros; `i` must not be below `buf_start`
    /// (frames only read from `t · 160 − 200`, and samples are dropped below that).
    fn sample(&self, i: usize) -> f32 {
        debug_assert!(i >= self.buf_start, "sample {i} was dropped");
        i.checked_sub(self.buf_start)
            .and_then(|k| self.buf.get(k))
            .copied()
            .unwrap_or(0.0)
    }

    /// The number of frames, known once the audio has ended.
    fn frame_count(&self) -> usize {
        if self.content_only {
            self.received / HOP_LENGTH
        } else {
            // Frames that reach into the audio: t · 160 − 200 < len.
            (self.received + N_FFT / 2).div_ceil(HOP_LENGTH)
        }
    }

    /// The next frame's mel power (`n_mels` values), `None` after the last.
    fn next_frame(&mut self, mel: &MelSpectrogram) -> Result<Option<&[f32]>> {
        let half = N_FFT / 2;
        let t = self.next;
        // The frame reads samples up to t·160 + 199, and frame 0's reflection x[200];
        // a content frame needs its whole hop of audio.
        let mut need = t * HOP_LENGTH + half + 1;
        if self.content_only {
            need = need.max((t + 1) * HOP_LENGTH);
        }
        while !self.eof && self.received < need {
            match self.source.next() {
                Some(chunk) => {
                    let chunk = chunk?;
                    self.received += chunk.len();
                    self.buf.extend_from_slice(&chunk);
                }
                None => self.eof = true,
            }
        }
        if self.eof && t >= self.frame_count() {
            return Ok(None);
        }
        // Drop samples no later frame reads (frame t reads from t·160 − 200).
        let keep_from = (t * HOP_LENGTH).saturating_sub(half);
        if keep_from > self.buf_start + 4 * N_FFT {
            self.buf.drain(..keep_from - self.buf_start);
            self.buf_start = keep_from;
        }
        for n in 0..N_FFT {
            // Padded index t·160 + n is audio index t·160 + n − 200, reflected below 0;
            // past the audio's end come zeros (the padding, and its reflection).
            let i = (t * HOP_LENGTH + n) as isize - half as isize;
            self.frame[n] = self.sample(i.unsigned_abs());
        }
        mel.frame_power(&self.frame, &mut self.scratch, &mut self.power);
        self.next += 1;
        Ok(Some(&self.power))
    }
}

/// One 30-second window of features.
#[derive(Clone, Debug)]
pub struct MelWindow {
    /// The window's first frame (10 ms units).
    pub seek: usize,
    /// Frames of audio in the window (≤ [`N_FRAMES`]); the rest are zeros.
    pub frames: usize,
    /// `(n_mels, N_FRAMES)` features.
    pub features: Tensor,
}

/// Whisper's 30-second log-mel windows of a long input, in bounded memory (see the
/// module doc): [`MelStream::window`] at any non-decreasing `seek`, or the fixed
/// 30-second steps of the iterator. It holds one window of frames and one chunk of
/// samples, whatever the jumps between seeks.
pub struct MelStream<I> {
    mel: MelSpectrogram,
    framer: Framer<I>,
    max: f32,
    /// Normalised frames from `first`, frame-major (frames, n_mels).
    frames: VecDeque<f32>,
    first: usize,
    /// Frames computed so far.
    computed: usize,
    /// All frames computed (the audio's frame count is `computed`).
    ended: bool,
    last_seek: Option<usize>,
}

impl<I> std::fmt::Debug for MelStream<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MelStream")
            .field("n_mels", &self.mel.n_mels)
            .field("max", &self.max)
            .field("computed", &self.computed)
            .finish()
    }
}

impl MelStream<AudioStream> {
    /// Both passes over a WAV file: the maximum, then a stream of windows.
    pub fn open_wav(path: impl AsRef<Path>, n_mels: usize) -> Result<Self> {
        let mel = MelSpectrogram::new(n_mels)?;
        let max = mel.max_log_mel(AudioStream::open(path.as_ref())?)?;
        Ok(MelStream::new(mel, AudioStream::open(path.as_ref())?, max))
    }
}

impl<I> MelStream<I>
where
    I: Iterator<Item = Result<Vec<f32>>>,
{
    /// Windows of the audio `source` gives (16 kHz mono chunks), normalised with
    /// `max` = [`MelSpectrogram::max_log_mel`] of the same audio.
    pub fn new(mel: MelSpectrogram, source: I, max: f32) -> Self {
        let framer = Framer::new(&mel, source, true);
        MelStream {
            mel,
            framer,
            max,
            frames: VecDeque::new(),
            first: 0,
            computed: 0,
            ended: false,
            last_seek: None,
        }
    }

    /// The log-mel maximum the windows are normalised with.
    pub fn max_log_mel(&self) -> f32 {
        self.max
    }

    /// The audio's frame count (`⌊samples / 160⌋`), once the stream has reached the end.
    pub fn content_frames(&self) -> Option<usize> {
        self.ended.then_some(self.computed)
    }

    /// Compute frames until `until` frames exist or the audio ends, keeping those from
    /// `keep` on.
    fn fill(&mut self, keep: usize, until: usize) -> Result<()> {
        while !self.ended && self.computed < until {
            match self.framer.next_frame(&self.mel) {
                Ok(Some(power)) => {
                    let t = self.computed;
                    if t >= keep {
                        if self.frames.is_empty() {
                            self.first = t;
                        }
                        let max = self.max;
                        self.frames.extend(power.iter().map(|&p| normalise(p, max)));
                    }
                    self.computed += 1;
                }
                Ok(None) => self.ended = true,
                Err(e) => {
                    self.ended = true;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The window of [`N_FRAMES`] frames from frame `seek`, `None` once `seek` is past
    /// the audio. `seek` must not go back (Whisper's transcriber only moves forward).
    pub fn window(&mut self, seek: usize) -> Result<Option<MelWindow>> {
        if let Some(last) = self.last_seek {
            if seek < last {
                return Err(Error::Argument(format!(
                    "mel window at frame {seek} after one at {last}: a stream only moves forward"
                )));
            }
        }
        self.last_seek = Some(seek);
        let n_mels = self.mel.n_mels;
        // Frames before `seek` are no longer needed (nor kept while filling).
        let held = self.frames.len() / n_mels;
        let drop = seek.saturating_sub(self.first).min(held);
        self.frames.drain(..drop * n_mels);
        self.first += drop;
        self.fill(seek, seek + N_FRAMES)?;
        if seek >= self.computed {
            return Ok(None);
        }
        let frames = (self.computed - seek).min(N_FRAMES);
        let mut data = vec![0f32; n_mels * N_FRAMES]; // (n_mels, N_FRAMES)
        for t in 0..frames {
            let base = (seek + t - self.first) * n_mels;
            for m in 0..n_mels {
                data[m * N_FRAMES + t] = self.frames[base + m];
            }
        }
        Ok(Some(MelWindow {
            seek,
            frames,
            features: Tensor::new(data, &[n_mels, N_FRAMES])?,
        }))
    }
}

impl<I> Iterator for MelStream<I>
where
    I: Iterator<Item = Result<Vec<f32>>>,
{
    type Item = Result<MelWindow>;

    /// Windows at 30-second steps (seek 0, 3000, 6000, ...).
    fn next(&mut self) -> Option<Self::Item> {
        let seek = self.last_seek.map_or(0, |s| s + N_FRAMES);
        self.window(seek).transpose()
    }
}

/// The first 30-second window of `mel` as Whisper's transcriber cuts it: the first
/// `min(frames, N_FRAMES)` frames, then zeros.
///
/// # Shapes
/// `mel`: `(n_mels, frames)`; result: `(n_mels, N_FRAMES)`.
pub fn first_window(mel: &Tensor) -> Result<Tensor> {
    let [n_mels, frames] = mel.dims()?;
    let keep = frames.min(N_FRAMES);
    let mut data = vec![0f32; n_mels * N_FRAMES];
    for m in 0..n_mels {
        data[m * N_FRAMES..m * N_FRAMES + keep]
            .copy_from_slice(&mel.data()[m * frames..m * frames + keep]);
    }
    Tensor::new(data, &[n_mels, N_FRAMES])
}
