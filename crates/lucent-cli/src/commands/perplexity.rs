//! `lucent perplexity -m MODEL --file TEXT`: how well a decoder predicts a text, by
//! llama.cpp's `llama-perplexity` procedure (windows of `--ctx` tokens, the second half
//! of each scored), so the number can be set beside llama.cpp's. A thin caller of
//! `lucent::pipeline::perplexity`; see docs/perplexity.md.

use indicatif::{ProgressBar, ProgressStyle};
use lucent::io::corpus;
use lucent::pipeline::perplexity::{self, Perplexity};
use lucent::{Error, Result};

use crate::loader;
use crate::progress::Bars;

/// Arguments of `lucent perplexity`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent perplexity -m smollm2 --file moby-dick --chars 8000 --ctx 128\n  lucent perplexity -m gemma3 --file moby-dick --chars 3000 --ctx 64 --json"
)]
pub struct Args {
    /// Model: a known decoder (smollm2, gemma3), a .gguf file or a `lucent train` run folder.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// The text: a UTF-8 file, or a corpus lucent fetches by name (moby-dick, sotu).
    #[arg(long, short = 'f')]
    pub file: String,
    /// Tokens per window (n_ctx): the first half of each is context, the second half
    /// is scored; 16 up to the model's context.
    #[arg(long, default_value_t = 512)]
    pub ctx: i64,
    /// Score only the first N windows (llama-perplexity's --chunks) [default: every
    /// whole window of the text].
    #[arg(long, value_name = "N")]
    pub chunks: Option<i64>,
    /// Read only the first N characters of the text [default: all of it].
    #[arg(long, value_name = "N")]
    pub chars: Option<i64>,
    /// Print one JSON object instead of the running values and the estimate.
    #[arg(long)]
    pub json: bool,
}

/// Run `lucent perplexity`.
pub fn run(args: Args) -> Result<()> {
    let ctx = usize::try_from(args.ctx).map_err(|_| {
        Error::Argument(format!(
            "--ctx {}: give a positive number of tokens",
            args.ctx
        ))
    })?;
    let chars = match args.chars {
        None => None,
        Some(n) if n > 0 => Some(n as usize),
        Some(n) => {
            return Err(Error::Argument(format!(
            "--chars {n}: give a positive number of characters, or leave it out for the whole text"
        )))
        }
    };
    let max_chunks = match args.chunks {
        None => None,
        Some(n) if n > 0 => Some(n as usize),
        Some(n) => {
            return Err(Error::Argument(format!(
                "--chunks {n}: give a positive number of windows, or leave it out for all of them"
            )))
        }
    };
    let path = corpus::resolve_corpus(&args.file, &mut Bars::default()).map_err(|e| match e {
        Error::Argument(_) => Error::Argument(format!(
            "--file {}: no such file (nor a corpus lucent knows: moby-dick, sotu)",
            args.file
        )),
        other => other,
    })?;
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let text = match chars {
        Some(n) => text.chars().take(n).collect(),
        None => text,
    };
    if text.trim().is_empty() {
        return Err(Error::Argument(format!(
            "--file {}: the text is empty; perplexity needs at least two windows of --ctx tokens",
            path.display()
        )));
    }
    let model = loader::open(&args.model)?;
    let tm = model
        .text_model()
        .map_err(|e| Error::Argument(format!("{e}; perplexity needs a decoder (a text model)")))?;
    perplexity::check_ctx(&tm.model, ctx)?;

    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("perplexity [{bar:30}] {pos}/{len} windows {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let start = std::time::Instant::now();
    let result =
        perplexity::perplexity(&tm, &text, ctx, max_chunks, &mut |done, total, running| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(format!("PPL {running:.4}"));
        });
    bar.finish_and_clear();
    let p = result?;
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        print_json(&args, &path, chars, &p, secs);
        return Ok(());
    }
    // As llama-perplexity prints them: the running estimate after each window.
    let running: Vec<String> = p
        .running
        .iter()
        .enumerate()
        .map(|(i, r)| format!("[{}]{r:.4}", i + 1))
        .collect();
    println!("{},", running.join(","));
    println!(
        "{} windows of {} tokens, {} tokens scored ({} in the text), {secs:.1} s",
        p.chunks, p.ctx, p.tokens_scored, p.n_tokens
    );
    println!("PPL = {:.4} ± {:.5}", p.ppl, p.ppl_err);
    Ok(())
}

fn print_json(
    args: &Args,
    path: &std::path::Path,
    chars: Option<usize>,
    p: &Perplexity,
    secs: f64,
) {
    let v = serde_json::json!({
        "model": args.model,
        "file": path.display().to_string(),
        "chars": chars,
        "ctx": p.ctx,
        "n_tokens": p.n_tokens,
        "chunks": p.chunks,
        "tokens_scored": p.tokens_scored,
        "ppl": p.ppl,
        "ppl_err": p.ppl_err,
        "mean_nll": p.mean_nll(),
        "running_ppl": p.running,
        "seconds": secs,
    });
    println!("{v:#}");
}
