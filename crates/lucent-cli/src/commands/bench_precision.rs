//! `lucent bench precision`: what each precision costs and buys, measured side by side
//! on one model in one run — speed (sentences/s, rounds interleaved between the
//! precisions, medians) and distance to exact (cosine of each sentence's embedding to
//! the exact one: min and median; the largest difference of any number).
//!
//! Encoders (MiniLM, MPNet, BERT-family folders) and Whisper (`-m whisper-tiny.en`:
//! speed as the real-time factor of transcribing `--audio`, distance to exact as the
//! files whose transcript equals exact's and the word error rate against exact's
//! transcript); decoders run exact only and are refused in one line.

use std::path::PathBuf;
use std::time::Instant;

use lucent::pipeline::transcribe::{TranscribeOptions, Transcriber};
use lucent::pipeline::wer::word_error_rate;
use lucent::{Error, Precision, Result};

use crate::commands::bench_embed::SENTENCES;
use crate::commands::numbers::at_least;

/// Arguments of `lucent bench precision`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent bench precision -m minilm --runs 1\n  lucent bench precision -m minilm --threads-list 1 --runs 1 --json\n  lucent bench precision -m whisper-tiny.en --audio examples/speech.wav --runs 1"
)]
pub struct Args {
    /// An encoder or a Whisper model: a model name (see `lucent models`), a Hugging Face
    /// or CTranslate2 folder.
    #[arg(long, short = 'm', default_value = "minilm")]
    model: String,
    /// Thread counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = at_least::<1, usize>)]
    threads_list: Vec<usize>,
    /// Sentences per forward pass.
    #[arg(long, default_value_t = 32, value_parser = at_least::<1, usize>)]
    batch: usize,
    /// Timed rounds (each round times every precision once; medians are reported).
    #[arg(long, default_value_t = 5, value_parser = at_least::<1, usize>)]
    runs: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// WAV files a Whisper model transcribes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "examples/speech.wav")]
    audio: Vec<PathBuf>,
}

/// How far one precision's embeddings land from exact.
struct Distance {
    min_cosine: f64,
    median_cosine: f64,
    max_abs: f32,
}

fn distance(exact: &[Vec<f32>], other: &[Vec<f32>]) -> Distance {
    let mut cos: Vec<f64> = exact
        .iter()
        .zip(other)
        .map(|(a, b)| {
            let dot: f64 = a
                .iter()
                .zip(b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            dot / (na * nb).max(f64::MIN_POSITIVE)
        })
        .collect();
    cos.sort_by(f64::total_cmp);
    let max_abs = exact
        .iter()
        .zip(other)
        .flat_map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
        .fold(0.0f32, f32::max);
    Distance {
        min_cosine: cos.first().copied().unwrap_or(f64::NAN),
        median_cosine: cos.get(cos.len() / 2).copied().unwrap_or(f64::NAN),
        max_abs,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Run `lucent bench precision`.
pub fn run(args: Args) -> Result<()> {
    let model = crate::loader::open(&args.model)?;
    if let Ok(t) = model.transcriber() {
        return run_whisper(&args, model.name(), t);
    }
    let exact = model.embedder().map_err(|_| {
        Error::Argument(format!(
            "{} is a {:?} model; precisions other than exact are built for encoders and Whisper so far (minilm, mpnet, BERT-family folders, whisper-*)",
            model.name(),
            model.kind()
        ))
    })?;
    let sentences: Vec<&str> = SENTENCES.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut models = vec![(Precision::Exact, exact.clone())];
    for p in Precision::ALL
        .into_iter()
        .filter(|&p| p != Precision::Exact)
    {
        let mut e = exact.as_ref().clone();
        e.set_precision(p);
        models.push((p, std::sync::Arc::new(e)));
    }
    let reference = exact.embed_batched(&sentences, args.batch)?;
    let mut rows = Vec::new();
    for (p, e) in &models {
        let d = distance(&reference, &e.embed_batched(&sentences, args.batch)?);
        rows.push((*p, d, Vec::new()));
    }
    for &n in &args.threads_list {
        let pool = lucent::Runtime::builder().threads(n).build()?;
        let times = pool.install(|| -> Result<Vec<Vec<f64>>> {
            let mut times = vec![Vec::new(); models.len()];
            for (_, e) in &models {
                e.embed_batched(&sentences[..32.min(sentences.len())], args.batch)?;
                // warm-up
            }
            for _ in 0..args.runs {
                for (i, (_, e)) in models.iter().enumerate() {
                    let t0 = Instant::now();
                    e.embed_batched(&sentences, args.batch)?;
                    times[i].push(t0.elapsed().as_secs_f64());
                }
            }
            Ok(times)
        })?;
        for (row, t) in rows.iter_mut().zip(times) {
            row.2.push((n, sentences.len() as f64 / median(t)));
        }
    }
    let exact_speed: Vec<f64> = rows[0].2.iter().map(|&(_, s)| s).collect();
    if args.json {
        let v = serde_json::json!({
            "model": model.name(),
            "sentences": sentences.len(),
            "batch": args.batch,
            "runs": args.runs,
            "int8_path": lucent::ops::linear_int8::int8_path(),
            "bf16_path": lucent::ops::linear_bf16::bf16_path(),
            "precisions": rows.iter().map(|(p, d, speed)| serde_json::json!({
                "precision": p.name(),
                "min_cosine": d.min_cosine,
                "median_cosine": d.median_cosine,
                "max_abs_diff": d.max_abs,
                "speed": speed.iter().zip(&exact_speed).map(|(&(n, s), e)| serde_json::json!({
                    "threads": n, "sentences_per_s": s, "vs_exact": s / e,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{} on {} sentences, batch {}, medians of {} interleaved rounds; int8 products: {}; bf16 products: {}",
        model.name(),
        sentences.len(),
        args.batch,
        args.runs,
        lucent::ops::linear_int8::int8_path(),
        lucent::ops::linear_bf16::bf16_path()
    );
    print!(
        "{:>9} {:>11} {:>11} {:>10}",
        "precision", "min cos", "median cos", "max |Δ|"
    );
    for &n in &args.threads_list {
        print!(" {:>14}", format!("sent/s ({n} thr)"));
    }
    println!();
    for (p, d, speed) in &rows {
        print!(
            "{:>9} {:>11.6} {:>11.6} {:>10.2e}",
            p.name(),
            d.min_cosine,
            d.median_cosine,
            d.max_abs
        );
        for (&(_, s), e) in speed.iter().zip(&exact_speed) {
            print!(" {:>14}", format!("{s:.1} ({:.2}×)", s / e));
        }
        println!();
    }
    Ok(())
}

/// One Whisper model in one precision, with its transcripts of the files.
struct WhisperRow {
    precision: Precision,
    texts: Vec<String>,
    /// (threads, median seconds for all the files).
    seconds: Vec<(usize, f64)>,
}

/// Transcribe every file: (texts, seconds of audio in all).
fn transcribe_all(t: &Transcriber, files: &[PathBuf]) -> Result<(Vec<String>, f64)> {
    let opts = TranscribeOptions::default();
    let mut texts = Vec::new();
    let mut seconds = 0.0;
    for f in files {
        let tr = t.transcribe(f, &opts)?;
        texts.push(tr.text.trim().to_string());
        seconds += tr.duration;
    }
    Ok((texts, seconds))
}

/// `lucent bench precision` for a Whisper model: each precision transcribes `--audio`
/// (openai-whisper's defaults: greedy, timestamps, temperature fallback); speed as the
/// real-time factor (seconds of compute per second of audio, medians of interleaved
/// rounds), distance as transcripts equal to exact's and the word error rate against
/// exact's transcripts.
fn run_whisper(args: &Args, name: &str, exact: std::sync::Arc<Transcriber>) -> Result<()> {
    let mut models = vec![(Precision::Exact, exact)];
    for p in Precision::ALL
        .into_iter()
        .filter(|&p| p != Precision::Exact)
    {
        models.push((p, crate::loader::open_in(&args.model, p)?.transcriber()?));
    }
    let mut rows = Vec::new();
    let mut audio_seconds = 0.0;
    for (p, t) in &models {
        let (texts, seconds) = transcribe_all(t, &args.audio)?;
        audio_seconds = seconds;
        rows.push(WhisperRow {
            precision: *p,
            texts,
            seconds: Vec::new(),
        });
    }
    for &n in &args.threads_list {
        let pool = lucent::Runtime::builder().threads(n).build()?;
        let times = pool.install(|| -> Result<Vec<Vec<f64>>> {
            let mut times = vec![Vec::new(); models.len()];
            for (_, t) in &models {
                transcribe_all(t, &args.audio)?; // warm-up
            }
            for _ in 0..args.runs {
                for (i, (_, t)) in models.iter().enumerate() {
                    let t0 = Instant::now();
                    transcribe_all(t, &args.audio)?;
                    times[i].push(t0.elapsed().as_secs_f64());
                }
            }
            Ok(times)
        })?;
        for (row, t) in rows.iter_mut().zip(times) {
            row.seconds.push((n, median(t)));
        }
    }
    let exact_texts = rows[0].texts.clone();
    let distance = |row: &WhisperRow| {
        let equal = row
            .texts
            .iter()
            .zip(&exact_texts)
            .filter(|(a, b)| a == b)
            .count();
        let wer = word_error_rate(
            exact_texts
                .iter()
                .zip(&row.texts)
                .map(|(e, h)| (e.as_str(), h.as_str())),
        );
        (equal, wer)
    };
    let rtf = |s: f64| s / audio_seconds.max(f64::MIN_POSITIVE);
    if args.json {
        let v = serde_json::json!({
            "model": name,
            "files": args.audio,
            "audio_seconds": audio_seconds,
            "runs": args.runs,
            "int8_path": lucent::ops::linear_int8::int8_path(),
            "bf16_path": lucent::ops::linear_bf16::bf16_path(),
            "precisions": rows.iter().map(|row| {
                let (equal, wer) = distance(row);
                serde_json::json!({
                    "precision": row.precision.name(),
                    "transcripts_equal_exact": equal,
                    "wer_vs_exact": wer,
                    "texts": row.texts,
                    "speed": row.seconds.iter().zip(&rows[0].seconds).map(|(&(n, s), &(_, e))| serde_json::json!({
                        "threads": n, "seconds": s, "rtf": rtf(s), "vs_exact": e / s,
                    })).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{name} on {} file(s), {audio_seconds:.1} s of audio, medians of {} interleaved rounds; int8 products: {}; bf16 products: {}",
        args.audio.len(),
        args.runs,
        lucent::ops::linear_int8::int8_path(),
        lucent::ops::linear_bf16::bf16_path()
    );
    print!(
        "{:>9} {:>12} {:>13}",
        "precision", "= exact", "WER vs exact"
    );
    for &n in &args.threads_list {
        print!(" {:>16}", format!("RTF ({n} thr)"));
    }
    println!();
    for row in &rows {
        let (equal, wer) = distance(row);
        print!(
            "{:>9} {:>12} {:>12.2}%",
            row.precision.name(),
            format!("{equal} of {}", row.texts.len()),
            100.0 * wer
        );
        for (&(_, s), &(_, e)) in row.seconds.iter().zip(&rows[0].seconds) {
            print!(" {:>16}", format!("{:.4} ({:.2}×)", rtf(s), e / s));
        }
        println!();
    }
    Ok(())
}
