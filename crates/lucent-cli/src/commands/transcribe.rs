//! `lucent transcribe`: speech to text with Whisper (a WAV file in any common form →
//! 16 kHz mono → 30-second log-mel windows → the encoder-decoder, decoded as Whisper
//! does: timestamp rules, suppressed tokens, temperature fallback, silent windows
//! skipped, seeking windows). What a reader should know about the transcript (a window
//! skipped as silence, audio sampled below 8 kHz) goes to stderr, one line each, and
//! into `--json` as `notes`.

use std::path::PathBuf;

use lucent::pipeline::transcribe::{sample_rate_note, Task, TranscribeOptions, Transcript};
use lucent::{Error, Precision, Result};

/// Arguments of `lucent transcribe`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent transcribe examples/speech.wav\n  lucent transcribe examples/speech.wav --timestamps\n  lucent transcribe -m whisper-base examples/speech.wav --language en --json\n  lucent transcribe examples/speech.wav --words\n  lucent transcribe examples/speech.wav --beam 3 --threads 2\n  lucent transcribe examples/speech.wav --precision int8\n  lucent transcribe examples/speech.wav --no-speech-threshold none\n\nSilence and failed decodings, as openai-whisper's transcribe() judges them: a 30-second\nwindow is decoded again at the next temperature (0, 0.2, … 1.0) while its text compresses\nbetter than --compression-ratio-threshold (repetition) or its average log-probability is\nbelow --logprob-threshold; a window whose <|nospeech|> probability is above\n--no-speech-threshold gives no text (a note on stderr says so) unless its average\nlog-probability is above --logprob-threshold. `none` turns a threshold off."
)]
pub struct Args {
    /// The audio: a WAV file (4–192 kHz, mono or stereo, 8/16/24/32-bit int or 32-bit
    /// float; below 8 kHz a warning says the transcript may be wrong).
    file: PathBuf,
    /// A Whisper model (`whisper-tiny.en`, `whisper-base`) or a CTranslate2 Whisper folder.
    #[arg(long, short = 'm', default_value = "whisper-tiny.en")]
    model: String,
    /// Print the transcript as JSON (language, text, segments with times and scores).
    #[arg(long)]
    json: bool,
    /// Show each segment with its start and end times.
    #[arg(long)]
    timestamps: bool,
    /// The spoken language (`en`, `de`, …) [default: detected by a multilingual model; `en`
    /// for an English-only one].
    #[arg(long, value_name = "XX")]
    language: Option<String>,
    /// Translate into English instead of transcribing (multilingual models).
    #[arg(long)]
    translate: bool,
    /// Beam search with N beams (1: greedy).
    #[arg(long, value_name = "N", default_value_t = 1)]
    beam: usize,
    /// Word-level times (cross-attention of the model's alignment heads + dynamic time
    /// warping, as Whisper's `word_timestamps`): one line per word, or `words` in each
    /// `--json` segment.
    #[arg(long)]
    words: bool,
    /// Decode without timestamp tokens (one segment per 30-second window).
    #[arg(long)]
    no_timestamp_tokens: bool,
    /// A window whose `<|nospeech|>` probability is above this is silence (no text),
    /// unless its average log-probability is above --logprob-threshold; `none`: never.
    #[arg(long, value_name = "P|none", default_value = "0.6")]
    no_speech_threshold: Threshold,
    /// Decode a window again at the next temperature when its average log-probability
    /// is below this; `none`: never.
    #[arg(
        long,
        value_name = "LOGP|none",
        default_value = "-1.0",
        allow_negative_numbers = true
    )]
    logprob_threshold: Threshold,
    /// Decode a window again at the next temperature when its text's zlib compression
    /// ratio is above this (repetition); `none`: never.
    #[arg(long, value_name = "RATIO|none", default_value = "2.4")]
    compression_ratio_threshold: Threshold,
    /// How the model's weight products are computed: `exact` (CTranslate2 float32's
    /// numbers), `bf16` or `int8` (int8 where measured harmless, the rest bf16; see
    /// docs/precision.md, and `lucent bench precision -m whisper-tiny.en` for how close
    /// to exact each lands).
    #[arg(long, default_value = "exact", value_parser = parse_precision)]
    precision: Precision,
}

/// `--precision`'s parser (the library's names and its one-line refusal).
fn parse_precision(s: &str) -> std::result::Result<Precision, String> {
    s.parse::<Precision>().map_err(|e| e.to_string())
}

/// A threshold flag's value: a number, or `none` (the rule is off).
#[derive(Clone, Copy, Debug)]
struct Threshold(Option<f32>);

impl std::str::FromStr for Threshold {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s.eq_ignore_ascii_case("none") {
            return Ok(Threshold(None));
        }
        match s.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok(Threshold(Some(v))),
            _ => Err(format!("'{s}' is not a number or `none`")),
        }
    }
}

fn hms(t: f64) -> String {
    let ms = (t * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// Run `lucent transcribe`.
pub fn run(args: Args) -> Result<()> {
    if args.beam == 0 {
        return Err(Error::Argument("--beam must be at least 1".into()));
    }
    let model = crate::loader::open_in(&args.model, args.precision)?;
    let t = model.transcriber()?;
    let opts = TranscribeOptions {
        language: args.language.clone(),
        task: if args.translate {
            Task::Translate
        } else {
            Task::Transcribe
        },
        timestamps: !args.no_timestamp_tokens,
        beam_size: args.beam,
        word_timestamps: args.words,
        no_speech_threshold: args.no_speech_threshold.0,
        logprob_threshold: args.logprob_threshold.0,
        compression_ratio_threshold: args.compression_ratio_threshold.0,
        ..TranscribeOptions::default()
    };
    let tr: Transcript = t.transcribe(&args.file, &opts)?;
    // One line each on stderr: the low sample rate as a warning, silent windows as notes.
    let low_rate = sample_rate_note(tr.sample_rate);
    for note in &tr.notes {
        let kind = if Some(note) == low_rate.as_ref() {
            "warning"
        } else {
            "note"
        };
        eprintln!("{kind}: {note}");
    }
    if args.json {
        let v = serde_json::json!({
            "model": model.name(),
            "precision": model.precision().name(),
            "file": args.file,
            "language": tr.language,
            "duration": tr.duration,
            "sample_rate": tr.sample_rate,
            "text": tr.text.trim(),
            "segments": tr.segments,
            "silent": tr.silent,
            "notes": tr.notes,
        });
        println!("{v}");
    } else if args.words {
        for s in &tr.segments {
            for w in s.words.iter().flatten() {
                println!("[{} --> {}] {}", hms(w.start), hms(w.end), w.word.trim());
            }
        }
    } else if args.timestamps {
        for s in &tr.segments {
            println!("[{} --> {}] {}", hms(s.start), hms(s.end), s.text.trim());
        }
    } else if !tr.text.trim().is_empty() {
        println!("{}", tr.text.trim());
    }
    Ok(())
}
