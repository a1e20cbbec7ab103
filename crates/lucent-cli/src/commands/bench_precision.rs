//! `lucent bench precision`: what each precision costs and buys, measured side by side
//! on one model in one run — speed (sentences/s, rounds interleaved between the
//! precisions, medians) and distance to exact (cosine of each sentence's embedding to
//! the exact one: min and median; the largest difference of any number).
//!
//! Encoders (MiniLM, MPNet, BERT-family folders) and Whisper (`-m whisper-tiny.en`:
//! speed as the real-time factor of transcribing `--audio`, distance to exact as the
//! files whose transcript equals exact's and the word error rate against exact's
//! transcript) and decoders (`-m smollm2`, any .gguf: speed as generated tokens/s of one
//! stream and of `--streams` streams decoded as one batch, distance to exact as the
//! share of greedy `--new-tokens` continuations equal to exact's on the suite's prompt
//! set and the perplexity of `--chars` characters of `--file` in windows of `--ctx`).

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
    after_help = "Examples:\n  lucent bench precision -m minilm --runs 1\n  lucent bench precision -m minilm --threads-list 1 --runs 1 --json\n  lucent bench precision -m whisper-tiny.en --audio examples/speech.wav --runs 1\n  lucent bench precision -m smollm2 --threads-list 2 --runs 1 --steps 2 --new-tokens 8 --chars 2000"
)]
pub struct Args {
    /// An encoder, a Whisper model or a decoder: a model name (see `lucent models`), a
    /// Hugging Face or CTranslate2 folder, a .gguf file.
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
    /// A decoder's prompts, one a line (`\n` for a newline) [default: the suite's 20,
    /// tests/data/decoder_precision_prompts.txt].
    #[arg(long)]
    prompts: Option<PathBuf>,
    /// A decoder's greedy continuation length compared with exact's.
    #[arg(long, default_value_t = 32, value_parser = at_least::<1, usize>)]
    new_tokens: usize,
    /// The text of a decoder's perplexity: a UTF-8 file or a corpus (moby-dick, sotu).
    #[arg(long, default_value = "moby-dick")]
    file: String,
    /// Characters of --file scored.
    #[arg(long, default_value_t = 8000, value_parser = at_least::<1, usize>)]
    chars: usize,
    /// Positions per perplexity window.
    #[arg(long, default_value_t = 128, value_parser = at_least::<16, usize>)]
    ctx: usize,
    /// Sequences a decoder decodes as one batch for the batched speed.
    #[arg(long, default_value_t = 8, value_parser = at_least::<1, usize>)]
    streams: usize,
    /// Decode steps timed per round (after a 64-token prompt).
    #[arg(long, default_value_t = 16, value_parser = at_least::<1, usize>)]
    steps: usize,
}

/// The suite's decoder prompts (`--prompts`' default).
const DECODER_PROMPTS: &str = include_str!("../../../../tests/data/decoder_precision_prompts.txt");

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
    if model.kind() == lucent::ModelKind::Decoder {
        return run_decoder(&args, model.name());
    }
    let exact = model.embedder().map_err(|_| {
        Error::Argument(format!(
            "{} is a {:?} model; lucent bench precision measures encoders, Whisper and decoders (minilm, mpnet, whisper-*, smollm2, gemma3, .gguf files)",
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

/// Generated tokens per second of `streams` sequences decoded together for `steps`
/// steps, each after a 64-token prompt (one timed round; the caches are filled first).
fn decode_tok_s(model: &lucent::model::DecoderModel, streams: usize, steps: usize) -> Result<f64> {
    let prompt: Vec<u32> = (0..64u32).map(|i| 100 + 7 * i).collect();
    let mut caches = (0..streams)
        .map(|_| {
            let mut c = model.new_cache(prompt.len() + steps + 1);
            model.forward(&prompt, Some(&mut c), true, None)?;
            Ok(c)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut ids: Vec<u32> = (0..streams as u32).map(|i| 300 + i).collect();
    let t0 = Instant::now();
    for _ in 0..steps {
        let mut refs: Vec<&mut lucent::nn::KvCache> = caches.iter_mut().collect();
        let z = model.decode_batch(&ids, &mut refs, &mut [])?; // (streams, V)
        let v = z.shape().last().copied().unwrap_or(1).max(1);
        for (id, row) in ids.iter_mut().zip(z.data().chunks(v)) {
            *id = row
                .iter()
                .enumerate()
                .fold((0usize, f32::NEG_INFINITY), |b, (i, &x)| {
                    if x > b.1 {
                        (i, x)
                    } else {
                        b
                    }
                })
                .0 as u32;
        }
    }
    Ok((streams * steps) as f64 / t0.elapsed().as_secs_f64())
}

/// `lucent bench precision` for a decoder: each precision's distance to exact (greedy
/// continuations equal to exact's, perplexity beside exact's) and its decode speed (one
/// stream, and `--streams` as one batch: rounds interleaved between the precisions,
/// medians).
fn run_decoder(args: &Args, name: &str) -> Result<()> {
    use lucent::pipeline::precision::{prompt_lines, DistanceSpec};
    let prompts = match &args.prompts {
        Some(p) => std::fs::read_to_string(p).map_err(|e| Error::io(p, e))?,
        None => DECODER_PROMPTS.to_string(),
    };
    let prompts = prompt_lines(&prompts);
    let path =
        lucent::io::corpus::resolve_corpus(&args.file, &mut crate::progress::Bars::default())?;
    let text: String = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(&path, e))?
        .chars()
        .take(args.chars)
        .collect();
    let spec = DistanceSpec {
        prompts: &prompts,
        new_tokens: args.new_tokens,
        text: &text,
        ctx: args.ctx,
        chunks: None,
    };
    let models = Precision::ALL
        .into_iter()
        .map(|p| Ok((p, crate::loader::open_in(&args.model, p)?.text_model()?)))
        .collect::<Result<Vec<_>>>()?;
    let exact = spec.run(&models[0].1)?;
    let distances = models
        .iter()
        .map(|(_, m)| spec.distance(m, &exact))
        .collect::<Result<Vec<_>>>()?;
    // speeds[precision] = [(threads, one stream tok/s, batched tok/s)]
    let mut speeds: Vec<Vec<(usize, f64, f64)>> = vec![Vec::new(); models.len()];
    for &n in &args.threads_list {
        let pool = lucent::Runtime::builder().threads(n).build()?;
        let times = pool.install(|| -> Result<Vec<(Vec<f64>, Vec<f64>)>> {
            let mut times = vec![(Vec::new(), Vec::new()); models.len()];
            for (_, m) in &models {
                decode_tok_s(&m.model, args.streams, 1)?; // warm-up
            }
            for _ in 0..args.runs {
                for (i, (_, m)) in models.iter().enumerate() {
                    times[i].0.push(decode_tok_s(&m.model, 1, args.steps)?);
                    times[i]
                        .1
                        .push(decode_tok_s(&m.model, args.streams, args.steps)?);
                }
            }
            Ok(times)
        })?;
        for (s, (one, many)) in speeds.iter_mut().zip(times) {
            s.push((n, median(one), median(many)));
        }
    }
    if args.json {
        let v = serde_json::json!({
            "model": name,
            "prompts": prompts.len(),
            "new_tokens": args.new_tokens,
            "file": args.file, "chars": args.chars, "ctx": args.ctx,
            "streams": args.streams, "steps": args.steps, "runs": args.runs,
            "int8_path": lucent::ops::linear_int8::int8_path(),
            "bf16_path": lucent::ops::linear_bf16::bf16_path(),
            "precisions": models.iter().zip(&distances).zip(&speeds).map(|(((p, _), d), s)| serde_json::json!({
                "precision": p.name(),
                "continuations_equal_exact": d.equal,
                "perplexity": d.ppl,
                "perplexity_vs_exact": d.ppl_change(),
                "speed": s.iter().map(|&(n, one, many)| serde_json::json!({
                    "threads": n, "one_stream_tok_s": one, "batched_tok_s": many,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{name}: {} prompts, greedy {} tokens; perplexity of {} chars of {} in windows of {}; decode after 64 tokens, {} steps, medians of {} interleaved rounds; int8 products: {}; bf16 products: {}",
        prompts.len(),
        args.new_tokens,
        args.chars,
        args.file,
        args.ctx,
        args.steps,
        args.runs,
        lucent::ops::linear_int8::int8_path(),
        lucent::ops::linear_bf16::bf16_path()
    );
    print!("{:>9} {:>10} {:>18}", "precision", "= exact", "perplexity");
    for &n in &args.threads_list {
        print!(
            " {:>17} {:>19}",
            format!("tok/s 1 ({n} thr)"),
            format!("tok/s {} ({n} thr)", args.streams)
        );
    }
    println!();
    for (((p, _), d), s) in models.iter().zip(&distances).zip(&speeds) {
        print!(
            "{:>9} {:>10} {:>18}",
            p.name(),
            format!("{} of {}", d.equal, d.prompts),
            format!("{:.4} ({:+.2}%)", d.ppl, 100.0 * d.ppl_change())
        );
        for (&(_, one, many), &(_, e1, em)) in s.iter().zip(&speeds[0]) {
            print!(
                " {:>17} {:>19}",
                format!("{one:.1} ({:.2}×)", one / e1),
                format!("{many:.1} ({:.2}×)", many / em)
            );
        }
        println!();
    }
    Ok(())
}
