//! `lucent generate PROMPT` and `lucent chat`: text from a decoder model (SmolLM2,
//! Gemma 3, any llama/gemma3 GGUF), streamed as it is produced.
//!
//! Greedy when the temperature is 0 (the default); otherwise the sampler chain
//! repetition penalty → top-k → top-p → min-p → softmax(z / T) → a seeded draw.

use std::io::{BufRead, IsTerminal, Write};

use lucent::io::fetch;
use lucent::pipeline::generate::{continue_generation, TextModel};
use lucent::pipeline::{GenerateOptions, Message, SamplingParams, StopReason};
use lucent::{Error, Result};

use crate::progress::Bars;

/// Sampling flags shared by `generate` and `chat`.
#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Temperature T (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling: the most likely tokens up to cumulative probability P (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Drop tokens less likely than P × the most likely one (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens (1 = off; 1.1 is typical).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Random seed (same seed, same text).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    /// As the library's parameters.
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: 64,
            seed: self.seed,
        }
    }
}

/// Arguments of `lucent generate`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent generate \"The capital of France is\"\n  lucent generate -m gemma3 --chat \"Why is the sky blue?\" -n 100 --temperature 0.7 --seed 1"
)]
pub struct Args {
    /// The prompt.
    pub prompt: String,
    /// Model: a known name (smollm2, gemma3) or a .gguf path.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// Most new tokens.
    #[arg(long = "max-tokens", short = 'n', default_value_t = 128)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop when the text contains this (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Do not stop at end-of-generation tokens (for benchmarks).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Wrap the prompt in the model's chat template (as a user message).
    #[arg(long)]
    pub chat: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// With --json: the K largest logits of the first step.
    #[arg(long, default_value_t = 0)]
    pub top_logits: usize,
}

/// Load a model by name or path, fetching a known one on first use.
pub fn load(spec: &str) -> Result<TextModel> {
    let path = fetch::resolve(spec, &mut Bars::default())?;
    if path.is_dir() {
        return Err(Error::Argument(format!(
            "{} is a folder; generation needs a decoder model in a .gguf file (e.g. -m smollm2)",
            path.display()
        )));
    }
    TextModel::load(&path)
}

/// Run `lucent generate`.
pub fn run(args: Args) -> Result<()> {
    if super::attention::is_trained_run(&args.model) {
        return super::train::run_sample(super::train::SampleArgs {
            model: args.model.into(),
            prompt: args.prompt,
            n: args.max_tokens,
            temperature: args.sampling.temperature,
            seed: args.sampling.seed,
            json: args.json,
        });
    }
    let tm = load(&args.model)?;
    let ids = if args.chat {
        tm.encode_chat(&[Message::new("user", &args.prompt)])?
    } else {
        tm.encode(&args.prompt)?
    };
    let opts = GenerateOptions {
        max_tokens: args.max_tokens,
        sampling: args.sampling.params(),
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        top_logits: args.top_logits,
    };
    let mut cache = tm.model.new_cache(ids.len() + args.max_tokens + 1);
    let mut out = std::io::stdout().lock();
    let mut sink = |s: &str| {
        if !args.json && !s.is_empty() {
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        }
    };
    let g = tm.generate(&ids, &opts, &mut cache, &mut sink)?;
    if args.json {
        let mut v = serde_json::json!({
            "model": tm.path.file_name().map(|n| n.to_string_lossy().into_owned()),
            "prompt_ids": g.prompt_ids,
            "ids": g.ids,
            "text": g.text,
            "timings": {"prefill_tok_s": g.prefill_tok_s(), "decode_tok_s": g.decode_tok_s()},
        });
        if args.top_logits > 0 {
            v["top_logits"] = g
                .top_logits
                .iter()
                .map(|(i, z)| serde_json::json!([i, z]))
                .collect();
        }
        println!("{v}");
        return Ok(());
    }
    println!();
    if let StopReason::ContextFull(n) = g.stop {
        eprintln!("[stopped: the context of {n} positions is full]");
    }
    eprintln!(
        "[{} prompt tokens at {:.1} tok/s; {} new at {:.1} tok/s; stop: {}]",
        g.prompt_ids.len(),
        g.prefill_tok_s(),
        g.ids.len(),
        g.decode_tok_s(),
        g.stop
    );
    Ok(())
}

/// Arguments of `lucent chat`.
#[derive(clap::Args)]
#[command(
    after_help = "Type a message and press Enter; /exit (or end of input) ends, /reset forgets the conversation.\nExample: echo 'What is 2 + 2?' | lucent chat -m smollm2"
)]
pub struct ChatArgs {
    /// Model: a known name (smollm2, gemma3) or a .gguf path.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// A system message to begin with.
    #[arg(long)]
    pub system: Option<String>,
    /// Most new tokens per reply.
    #[arg(long = "max-tokens", short = 'n', default_value_t = 512)]
    pub max_tokens: usize,
    /// Context length (tokens of the whole conversation).
    #[arg(long, default_value_t = 4096)]
    pub context: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Run `lucent chat`: keeps the conversation; each turn prefills only what is new.
pub fn run_chat(args: ChatArgs) -> Result<()> {
    let tm = load(&args.model)?;
    let mut cache = tm.model.new_cache(args.context);
    let mut messages: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new("system", s))
        .collect();
    // Ids the cache holds: the conversation so far as the template renders it.
    let mut cached: Vec<u32> = Vec::new();
    let tty = std::io::stdin().is_terminal();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut turn = 0u64;
    loop {
        if tty {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| Error::Argument(format!("reading stdin: {e}")))?;
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages.retain(|m| m.role == "system");
                cached.clear();
                cache.clear();
                eprintln!("[conversation cleared]");
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", line));
        let ids = tm.encode_chat(&messages)?;
        // Reuse the cache where the new rendering starts with what it holds.
        let common = cached.iter().zip(&ids).take_while(|(a, b)| a == b).count();
        let common = common.min(ids.len().saturating_sub(1));
        cache.truncate(common);
        let mut sampling = args.sampling.params();
        sampling.seed = sampling.seed.wrapping_add(turn);
        let opts = GenerateOptions {
            max_tokens: args.max_tokens,
            sampling,
            ..GenerateOptions::default()
        };
        let mut out = std::io::stdout().lock();
        let mut sink = |s: &str| {
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        };
        let g = match continue_generation(
            &tm.model,
            &tm.tokenizer,
            &ids[common..],
            &opts,
            &mut cache,
            &mut sink,
        ) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("\n[{e}]");
                messages.pop();
                cache.truncate(common);
                cached.truncate(common);
                continue;
            }
        };
        println!();
        if let StopReason::ContextFull(n) = g.stop {
            eprintln!("[the context of {n} positions is full; /reset to start again]");
        }
        cached = ids;
        cached.extend(&g.ids);
        messages.push(Message::new("assistant", g.text.trim()));
        turn += 1;
    }
    Ok(())
}
