//! `lucent transcribe`: speech to text with Whisper (a WAV file in any common form →
//! 16 kHz mono → 30-second log-mel windows → the encoder-decoder, decoded as Whisper
//! does: timestamp rules, suppressed tokens, temperature fallback, seeking windows).

use std::path::PathBuf;

use lucent::pipeline::transcribe::{Task, TranscribeOptions, Transcript};
use lucent::{Error, Result};

/// Arguments of `lucent transcribe`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent transcribe examples/speech.wav\n  lucent transcribe examples/speech.wav --timestamps\n  lucent transcribe -m whisper-base examples/speech.wav --language en --json\n  lucent transcribe examples/speech.wav --words\n  lucent transcribe examples/speech.wav --beam 3 --threads 2"
)]
pub struct Args {
    /// The audio: a WAV file (8–48 kHz, mono or stereo, 8/16/24/32-bit int or 32-bit float).
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
    let model = crate::loader::open(&args.model)?;
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
        ..TranscribeOptions::default()
    };
    let tr: Transcript = t.transcribe(&args.file, &opts)?;
    if args.json {
        let v = serde_json::json!({
            "model": model.name(),
            "file": args.file,
            "language": tr.language,
            "duration": tr.duration,
            "text": tr.text.trim(),
            "segments": tr.segments,
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
    } else {
        println!("{}", tr.text.trim());
    }
    Ok(())
}
