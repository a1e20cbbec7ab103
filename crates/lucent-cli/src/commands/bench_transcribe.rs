//! `lucent bench transcribe`: the lucent side of scripts/bench-transcribe-peer.sh.
//!
//! The same work as the peer's: every 30-second window of each clip at fixed 30-s steps,
//! its log-mel made beforehand (not timed); timed per window are the encoder and greedy
//! decoding with the no-timestamps prompt (tiny.en: `<|startoftranscript|>
//! <|notimestamps|>`; multilingual: with `<|en|> <|transcribe|>`, the language given)
//! under Whisper's rules (suppressed ids, suppress_blank) until `<|endoftext|>`. The
//! real-time factor is seconds of compute per second of audio. Thread counts take turns
//! (rounds of every configuration, after one untimed warm-up); medians are reported.

use std::path::PathBuf;
use std::time::Instant;

use lucent::io::mel::MelStream;
use lucent::pipeline::transcribe::{DecodeOptions, Task, Transcriber};
use lucent::{Error, Precision, Result, Tensor};
use rand::SeedableRng;

use crate::commands::numbers::at_least;

/// Options of `lucent bench transcribe`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Example: lucent bench transcribe -m whisper-tiny.en examples/speech.wav --threads-list 1 --rounds 1"
)]
pub struct Args {
    /// WAV files to transcribe [default: target/bench-audio/speech30.wav and speech180.wav,
    /// made by scripts/bench-transcribe-clips.sh].
    files: Vec<PathBuf>,
    /// Whisper models (comma-separated).
    #[arg(
        long,
        short = 'm',
        value_delimiter = ',',
        default_value = "whisper-tiny.en,whisper-base"
    )]
    model: Vec<String>,
    /// Thread counts to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = at_least::<1, usize>)]
    threads_list: Vec<usize>,
    /// Timed rounds (each runs every configuration once); medians reported.
    #[arg(long, default_value_t = 3, value_parser = at_least::<1, usize>)]
    rounds: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The models' precision (`exact`, `bf16`, `int8`; docs/precision.md).
    #[arg(long, default_value = "exact", value_parser = parse_precision)]
    precision: Precision,
}

/// `--precision`'s parser (the library's names and its one-line refusal).
fn parse_precision(s: &str) -> std::result::Result<Precision, String> {
    s.parse::<Precision>().map_err(|e| e.to_string())
}

/// A clip's windows of features and its length in seconds.
struct Clip {
    name: String,
    seconds: f64,
    windows: Vec<Tensor>,
}

fn clip(path: &PathBuf, n_mels: usize) -> Result<Clip> {
    let mut stream = MelStream::open_wav(path, n_mels)?;
    let mut windows = Vec::new();
    for w in &mut stream {
        windows.push(w?.features);
    }
    let frames = stream.content_frames().unwrap_or(0);
    Ok(Clip {
        name: path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        ),
        seconds: frames as f64 * 0.01,
        windows,
    })
}

/// One window-by-window pass over a clip: (seconds, tokens generated, seconds decoding).
fn run_clip(t: &Transcriber, c: &Clip, prompt: &[u32]) -> Result<(f64, usize, f64)> {
    let opts = DecodeOptions {
        timestamps: false,
        ..DecodeOptions::default()
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let (mut tokens, mut decode) = (0, 0.0);
    let start = Instant::now();
    for w in &c.windows {
        let memory = t.encode(w)?;
        let d0 = Instant::now();
        let r = t.decode_window(&memory, prompt, &opts, &mut rng)?;
        decode += d0.elapsed().as_secs_f64();
        tokens += r.tokens.len();
    }
    Ok((start.elapsed().as_secs_f64(), tokens, decode))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Run `lucent bench transcribe`.
pub fn run(args: Args) -> Result<()> {
    if args.rounds == 0 || args.threads_list.is_empty() || args.model.is_empty() {
        return Err(Error::Argument(
            "--rounds, --threads-list and --model must be non-empty / > 0".into(),
        ));
    }
    let files = if args.files.is_empty() {
        let dir = PathBuf::from("target/bench-audio");
        vec![dir.join("speech30.wav"), dir.join("speech180.wav")]
    } else {
        args.files.clone()
    };
    // (model, clip index, threads) → seconds of each round.
    let mut models = Vec::new();
    for m in &args.model {
        let model = crate::loader::open_in(m, args.precision)?;
        let t = model.transcriber()?;
        let clips = files
            .iter()
            .map(|f| clip(f, t.n_mels))
            .collect::<Result<Vec<_>>>()?;
        let lang = t.is_multilingual().then_some("en");
        let prompt = t.prompt(lang, Task::Transcribe, false)?;
        models.push((m.clone(), t, clips, prompt));
    }
    let runtimes = args
        .threads_list
        .iter()
        .map(|&n| {
            lucent::Runtime::builder()
                .threads(n)
                .build()
                .map(|rt| (n, rt))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut times: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut tokens = Vec::new();
    let mut configs = Vec::new();
    for (mi, (_, _, clips, _)) in models.iter().enumerate() {
        for ci in 0..clips.len() {
            for ri in 0..runtimes.len() {
                configs.push((mi, ci, ri));
            }
        }
    }
    for round in 0..=args.rounds {
        for (k, &(mi, ci, ri)) in configs.iter().enumerate() {
            let (_, t, clips, prompt) = &models[mi];
            let (secs, n, dec) = runtimes[ri].1.install(|| run_clip(t, &clips[ci], prompt))?;
            if round == 0 {
                times.push(Vec::new());
                tokens.push(n);
            } else {
                times[k].push((secs, dec));
            }
        }
    }
    let mut rows = Vec::new();
    for (k, &(mi, ci, ri)) in configs.iter().enumerate() {
        let (name, _, clips, _) = &models[mi];
        let c = &clips[ci];
        let secs = median(times[k].iter().map(|x| x.0).collect());
        let dec = median(times[k].iter().map(|x| x.1).collect());
        rows.push(serde_json::json!({
            "model": name,
            "precision": args.precision.name(),
            "clip": c.name,
            "audio_seconds": c.seconds,
            "windows": c.windows.len(),
            "threads": runtimes[ri].0,
            "seconds": secs,
            "rtf": secs / c.seconds.max(1e-9),
            "tokens": tokens[k],
            "decode_ms_per_token": 1e3 * dec / tokens[k].max(1) as f64,
            "all_runs": times[k].iter().map(|x| x.0).collect::<Vec<_>>(),
        }));
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"rounds": args.rounds, "runs": rows})
        );
        return Ok(());
    }
    println!(
        "lucent, {} interleaved rounds after a warm-up, medians",
        args.rounds
    );
    println!(
        "{:<16} {:<10} {:>7} {:>8} {:>7} {:>6} {:>9}  all runs",
        "model", "clip", "threads", "seconds", "RTF", "tokens", "ms/token"
    );
    for r in &rows {
        let runs: Vec<String> = r["all_runs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_f64())
                    .map(|x| format!("{x:.2}"))
                    .collect()
            })
            .unwrap_or_default();
        println!(
            "{:<16} {:<10} {:>7} {:>8.2} {:>7.4} {:>6} {:>9.2}  {}",
            r["model"].as_str().unwrap_or(""),
            r["clip"].as_str().unwrap_or(""),
            r["threads"],
            r["seconds"].as_f64().unwrap_or(0.0),
            r["rtf"].as_f64().unwrap_or(0.0),
            r["tokens"],
            r["decode_ms_per_token"].as_f64().unwrap_or(0.0),
            runs.join(" ")
        );
    }
    Ok(())
}
