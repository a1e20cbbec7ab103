//! `lucent`: run, inspect and train Transformers from the command line.
//!
//! One subcommand per task; each lives in `commands/NAME.rs` with its clap `Args` and a
//! `run` function. Every command that computes takes `--threads`, and most take `--json`
//! for machine-readable output.

mod commands;
mod config_args;
mod loader;
mod progress;
mod show;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// lucent — a Transformer engine you can see inside.
///
/// Every building block of the classic Transformer guides (attention, masks, positions,
/// feed-forward, norms, encoder and decoder), real pretrained models, and training,
/// with every intermediate step on show.
#[derive(Parser)]
#[command(name = "lucent", version, about, long_about, propagate_version = true)]
struct Cli {
    /// Threads for the kernels: 1 to 4 × the machine's logical CPUs (default: its
    /// physical cores).
    #[arg(long, global = true, value_name = "N", allow_negative_numbers = true)]
    threads: Option<i64>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text with a decoder model (SmolLM2, Gemma 3, any llama/gemma3 GGUF, or a model from `lucent train`).
    Generate(commands::generate::Args),
    /// Talk with a decoder model; keeps the conversation (reads stdin lines, /exit ends).
    Chat(commands::generate::ChatArgs),
    /// Speech to text with Whisper: a WAV file → text, segments with times, or JSON.
    Transcribe(commands::transcribe::Args),
    /// Sentence embeddings from a real encoder (all-MiniLM-L6-v2 by default).
    Embed(commands::embed::EmbedArgs),
    /// Cosine similarity matrix of two or more texts' embeddings.
    Similarity(commands::embed::SimilarityArgs),
    /// Vector arithmetic on embeddings: king - man + woman ≈ ?
    Analogy(commands::embed::AnalogyArgs),
    /// Attention step by step: `--demo` (the guides' example) or a real model's (`-m MODEL TEXT`).
    Attention(commands::attention::Args),
    /// Ablate attention heads (one, several, or every head in turn) and see a target token's log-probability change.
    Ablate(commands::intervene::AblateArgs),
    /// Activation patching, layer × position: how much of a clean run's answer each patched point restores.
    Patch(commands::intervene::PatchArgs),
    /// Generate with a steering vector added to the residual stream (from a file or contrasting prompts).
    Steer(commands::intervene::SteerArgs),
    /// Direct logit attribution: each head's and FFN's share of a target token's logit.
    Attribute(commands::intervene::AttributeArgs),
    /// Attention masks: causal, bidirectional, prefix-LM; which position sees which.
    Mask(commands::mask::Args),
    /// The sinusoidal position encoding table, its heatmap, nearby-vs-far similarity.
    Pe(commands::pe::Args),
    /// Softmax of a list of scores at one or more temperatures (the guides' table).
    Softmax(commands::softmax::Args),
    /// Exact parameter counts of a preset or custom config, component by component.
    Params(commands::params::Args),
    /// What a GGUF file holds (architecture, parameters, block types, RoPE, tokenizer) and whether lucent runs it.
    Inspect(commands::inspect::Args),
    /// Perplexity of a decoder on a text, by llama-perplexity's procedure (same windows, same number).
    Perplexity(commands::perplexity::Args),
    /// Bytes for weights, KV cache and attention scores at a batch and sequence length.
    Memory(commands::memory::Args),
    /// The tensor shape after every step of a forward pass.
    Shapes(commands::shapes::Args),
    /// Train a small Transformer from scratch: a GPT on text, or the encoder-decoder on a task.
    Train(commands::train::Args),
    /// Write a trained model for another engine: `lucent export hf RUN_DIR OUT_DIR` (a Hugging Face GPT-2 folder).
    Export(commands::export::Args),
    /// Download a model into the cache (done automatically on first use).
    Fetch(commands::fetch::FetchArgs),
    /// List the models lucent knows and which are cached.
    Models(commands::fetch::ModelsArgs),
    /// Serve models over HTTP with OpenAI's API (chat, completions, embeddings), batching requests.
    Serve(commands::serve::Args),
    /// Explore a model in the browser: attention heatmaps, the arithmetic, the residual stream, the logit lens.
    Explore(commands::explore::Args),
    /// Measure lucent's speed: `lucent bench kernels|embed|train|generate|transcribe` (medians of several runs).
    Bench(commands::bench::Args),
}

fn main() -> ExitCode {
    restore_sigpipe();
    tune_malloc();
    let cli = Cli::parse();
    // The default runtime's threads (and the cap LUCENT_ISA sets), before any work.
    if let Err(e) = threads(cli.threads).and_then(lucent::set_threads) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Attention(a) => commands::attention::run(a),
        Command::Mask(a) => commands::mask::run(a),
        Command::Ablate(a) => commands::intervene::run_ablate(a),
        Command::Patch(a) => commands::intervene::run_patch(a),
        Command::Steer(a) => commands::intervene::run_steer(a),
        Command::Attribute(a) => commands::intervene::run_attribute(a),
        Command::Pe(a) => commands::pe::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Softmax(a) => commands::softmax::run(a),
        Command::Export(a) => commands::export::run(a),
        Command::Fetch(a) => commands::fetch::run_fetch(a),
        Command::Models(a) => commands::fetch::run_models(a),
        Command::Params(a) => commands::params::run(a),
        Command::Memory(a) => commands::memory::run(a),
        Command::Perplexity(a) => commands::perplexity::run(a),
        Command::Inspect(a) => commands::inspect::run(a),
        Command::Shapes(a) => commands::shapes::run(a),
        Command::Transcribe(a) => commands::transcribe::run(a),
        Command::Embed(a) => commands::embed::run_embed(a),
        Command::Similarity(a) => commands::embed::run_similarity(a),
        Command::Analogy(a) => commands::embed::run_analogy(a),
        Command::Train(a) => commands::train::run(a),
        Command::Generate(a) => commands::generate::run(a),
        Command::Chat(a) => commands::generate::run_chat(a),
        Command::Serve(a) => commands::serve::run(a),
        Command::Explore(a) => commands::explore::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--threads N` checked: 1 to [`lucent::runtime::max_threads`]; none given is the
/// library's default (0: the machine's physical cores).
fn threads(n: Option<i64>) -> lucent::Result<usize> {
    let max = lucent::runtime::max_threads();
    match n {
        None => Ok(0),
        Some(n) if n >= 1 && n as u64 <= max as u64 => Ok(n as usize),
        Some(n) => Err(lucent::Error::Argument(format!(
            "--threads {n}: give 1 to {max} (4 × this machine's {} logical CPUs; leave it out \
             for the default, one per physical core)",
            max / 4
        ))),
    }
}

/// Let `lucent ... | head` end quietly: Rust ignores SIGPIPE, which turns a closed pipe
/// into a panic inside `println!`; the default action ends the process as other Unix
/// tools do.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to its default at start-up, before any
    // threads exist, has no memory-safety implications.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Keep tensor-sized buffers in the heap: glibc hands every allocation above its
/// (adaptive) mmap threshold fresh pages from the kernel and returns them on free, so a
/// forward or training step that allocates and frees the same activation sizes again and
/// again pays page faults and zeroing each time. Allocations up to 64 MiB now come from
/// the heap, and up to 128 MiB of free heap is kept instead of trimmed (measured:
/// `lucent bench train` at 1 thread, 10–15 % more tokens/s).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation thresholds; called at start-up.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
        libc::mallopt(libc::M_TOP_PAD, 16 << 20);
    }
}
