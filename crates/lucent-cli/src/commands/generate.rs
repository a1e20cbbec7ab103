//! `lucent generate PROMPT` and `lucent chat`: text from a decoder model (SmolLM2,
//! Gemma 3, any llama/gemma3 GGUF, a model from `lucent train`), streamed as it is
//! produced.
//!
//! An instruct model's prompt goes through its chat template unless `--raw` asks for a
//! plain continuation; sampling defaults to llama.cpp's (T 0.8, top-k 40, top-p 0.95,
//! min-p 0.05); `--temperature 0` is greedy and gives llama.cpp's exact tokens.

use std::io::{BufRead, IsTerminal, Write};

use lucent::pipeline::Message;
use lucent::{Error, Generator, Result, Sampling, StopReason};

use crate::loader;

/// Sampling flags shared by `generate` and `chat`.
#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Temperature T (0 = greedy: argmax every step, deterministic).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling: the most likely tokens up to cumulative probability P (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than P × the most likely one (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens (1 = off; 1.1 is typical).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Random seed (same seed, same text; default: a fresh one each run, printed).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// As the library's sampling settings, with at most `max_tokens` new tokens.
    pub fn sampling(&self, max_tokens: usize) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed: self.seed.unwrap_or_else(fresh_seed),
            max_tokens,
            context_shift: true,
            ..Sampling::greedy()
        }
    }
}

/// A seed from the clock (for runs that did not ask for one).
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        % 1_000_000_007
}

/// Arguments of `lucent generate`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent generate \"What is the capital of France?\"\n  lucent generate --raw --temperature 0 \"The capital of France is\" -n 16\n  lucent generate -m gemma3 \"Why is the sky blue?\" -n 100 --seed 1\n  lucent generate -m runs/moby --top-p 0.9 \"Call me\""
)]
pub struct Args {
    /// The prompt (an instruct model gets it as a user message; see --raw).
    pub prompt: String,
    /// Model: a known name (smollm2, gemma3), a .gguf file or a `lucent train` run folder.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// Most new tokens.
    #[arg(long = "max-tokens", short = 'n', default_value_t = 128)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop when the text contains this (repeatable) [default: none; the model's end
    /// tokens always stop it].
    #[arg(long)]
    pub stop: Vec<String>,
    /// Do not stop at end-of-generation tokens (for benchmarks).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Continue the prompt as plain text (special-token text in it is parsed, as
    /// llama.cpp does), without the chat template.
    #[arg(long, conflicts_with = "chat")]
    pub raw: bool,
    /// Wrap the prompt in the model's chat template (the default when it has one).
    #[arg(long)]
    pub chat: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// With --json: the K largest logits of the first step.
    #[arg(long, default_value_t = 0)]
    pub top_logits: usize,
}

/// Run `lucent generate`.
pub fn run(args: Args) -> Result<()> {
    let model = loader::open(&args.model)?;
    if let (Some(trained), lucent::ModelKind::EncoderDecoder) = (model.trained(), model.kind()) {
        // A task model transforms its input (greedy decoding) rather than continue it.
        let text = trained.sample(&args.prompt, 0, 0.0, 0)?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"prompt": args.prompt, "text": text})
            );
        } else {
            println!("{text}");
        }
        return Ok(());
    }
    let tm = model.text_model()?;
    let chat = match (args.raw, args.chat, tm.template.is_some()) {
        (true, _, _) => false,
        (false, true, false) => {
            return Err(Error::Argument(format!(
                "{} has no chat template (a model trained on plain text); drop --chat",
                args.model
            )))
        }
        (false, _, has) => has,
    };
    let mut gen = Generator::new(tm);
    let ids = if chat {
        gen.encode_chat(&[Message::new("user", &args.prompt)])?
    } else {
        gen.encode(&args.prompt)?
    };
    let mut sampling = args.sampling.sampling(args.max_tokens);
    sampling.stop = args.stop.clone();
    sampling.ignore_eos = args.ignore_eos;
    sampling.top_logits = args.top_logits;
    let mut out = std::io::stdout().lock();
    let mut sink = |s: &str| {
        if !args.json && !s.is_empty() {
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        }
    };
    let g = gen.generate(&ids, &sampling, &mut sink)?;
    if args.json {
        let mut v = serde_json::json!({
            "model": args.model,
            "chat": chat,
            "seed": sampling.seed,
            "temperature": sampling.temperature,
            "prompt_ids": g.prompt_ids,
            "ids": g.ids,
            "text": g.text,
            "finish_reason": g.stop.finish_reason(),
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
        "[{} prompt tokens at {:.1} tok/s; {} new at {:.1} tok/s; stop: {}; seed {}]",
        g.prompt_ids.len(),
        g.prefill_tok_s(),
        g.ids.len(),
        g.decode_tok_s(),
        g.stop,
        sampling.seed
    );
    Ok(())
}

/// Arguments of `lucent chat`.
#[derive(clap::Args)]
#[command(
    after_help = "Type a message and press Enter; /exit (or end of input) ends, /reset forgets the conversation.\nExample: echo 'What is 2 + 2?' | lucent chat -m smollm2 --temperature 0"
)]
pub struct ChatArgs {
    /// Model: a known name (smollm2, gemma3) or a .gguf path.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// A system message to begin with [default: none: the template's own, if any].
    #[arg(long)]
    pub system: Option<String>,
    /// Most new tokens per reply.
    #[arg(long = "max-tokens", short = 'n', default_value_t = 512)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Run `lucent chat`: keeps the conversation; each turn prefills only what is new.
pub fn run_chat(args: ChatArgs) -> Result<()> {
    let mut gen = Generator::new(loader::text_model(&args.model)?);
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
    let base = args.sampling.sampling(args.max_tokens);
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
                gen.reset();
                eprintln!("[conversation cleared]");
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", line));
        let ids = gen.encode_chat(&messages)?;
        // Reuse the cache where the new rendering starts with what it holds.
        let common = cached.iter().zip(&ids).take_while(|(a, b)| a == b).count();
        let common = common.min(ids.len().saturating_sub(1));
        gen.truncate(common);
        let mut sampling = base.clone();
        sampling.seed = sampling.seed.wrapping_add(turn);
        let mut out = std::io::stdout().lock();
        let mut sink = |s: &str| {
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        };
        let g = match gen.continue_with(&ids[common..], &sampling, &mut sink) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("\n[{e}]");
                messages.pop();
                gen.truncate(common);
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
