//! `lucent generate PROMPT` and `lucent chat`: text from a decoder model (SmolLM2,
//! Gemma 3, any llama/gemma3 GGUF, a model from `lucent train`), streamed as it is
//! produced.
//!
//! An instruct model's prompt goes through its chat template unless `--raw` asks for a
//! plain continuation; sampling defaults to llama.cpp's (T 0.8, top-k 40, top-p 0.95,
//! min-p 0.05); `--temperature 0` is greedy and gives llama.cpp's exact tokens.
//! `--json-schema`, `--grammar` and `--regex` constrain the text (structured outputs:
//! `lucent::pipeline::constrain`).

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lucent::pipeline::generate::TextModel;
use lucent::pipeline::{Constraint, Message};
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
    /// Print special tokens' text (`<|im_end|>`, `<start_of_image>`) in the output; by
    /// default they are left out of the text.
    #[arg(long)]
    pub special: bool,
    /// Add BIAS (-100 to 100) to token ID's logit before sampling, as OpenAI's
    /// `logit_bias` (repeatable): -100 bans the token, 100 all but forces it
    /// [default: none].
    #[arg(long, value_name = "ID=BIAS", value_parser = parse_bias, allow_hyphen_values = true)]
    pub logit_bias: Vec<(u32, f32)>,
    #[command(flatten)]
    pub constrain: ConstraintArgs,
}

/// Structured-output flags (at most one): the text must match a JSON schema, a Lark
/// grammar or a regex; tokens that would leave it are never sampled.
#[derive(clap::Args, Clone, Debug)]
#[group(multiple = false)]
pub struct ConstraintArgs {
    /// The text is a JSON document valid under the JSON schema in FILE (properties in
    /// the schema's order; `{"type": "object"}` for any object) [default: free text].
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<std::path::PathBuf>,
    /// The text is in the language of the Lark grammar in FILE (llguidance's Lark: a
    /// `start` rule, /regex/ terminals, `%json {...}` for an embedded schema) [default:
    /// free text].
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<std::path::PathBuf>,
    /// The text matches the regular expression RE as a whole (Rust regex syntax), e.g.
    /// `--regex '(yes|no)'` [default: free text].
    #[arg(long, value_name = "RE")]
    pub regex: Option<String>,
}

impl ConstraintArgs {
    /// The constraint these flags ask for (None: free text), compiled once against
    /// `tm`'s vocabulary as a check: errors name the flag and file, and what is wrong.
    pub fn constraint(&self, tm: &TextModel) -> Result<Option<Constraint>> {
        let read = |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| Error::io(p, e));
        let (flag, c) = if let Some(p) = &self.json_schema {
            let c = Constraint::json_schema_str(&read(p)?)
                .map_err(|e| Error::Argument(format!("--json-schema {}: {e}", p.display())))?;
            (format!("--json-schema {}", p.display()), c)
        } else if let Some(p) = &self.grammar {
            (
                format!("--grammar {}", p.display()),
                Constraint::Lark(read(p)?),
            )
        } else if let Some(r) = &self.regex {
            (format!("--regex {r:?}"), Constraint::Regex(r.clone()))
        } else {
            return Ok(None);
        };
        tm.compile(&c)
            .map_err(|e| Error::Argument(format!("{flag}: {e}")))?;
        Ok(Some(c))
    }
}

/// `ID=BIAS` of `--logit-bias`.
fn parse_bias(s: &str) -> std::result::Result<(u32, f32), String> {
    let (id, b) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: write ID=BIAS, e.g. 2=-100"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("{id:?} is not a token id"))?;
    let b: f32 = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not a number"))?;
    if !(-100.0..=100.0).contains(&b) {
        return Err(format!("bias {b} is outside -100 to 100"));
    }
    Ok((id, b))
}

/// Chat-template flags shared by `generate` and `chat`.
#[derive(clap::Args, Clone, Debug)]
pub struct TemplateArgs {
    /// The chat template: a Jinja file, or the built-in `chatml` or `gemma` [default: the
    /// model file's own; a file without one is a base model and gets no chat turns].
    #[arg(long, value_name = "FILE|chatml|gemma")]
    pub chat_template: Option<String>,
    /// Keep the system message the chat template writes when you give none (SmolLM2's
    /// "You are a helpful AI assistant named SmolLM…"), as llama.cpp does. By default
    /// lucent sends only the messages you give: with that system message SmolLM2-135M
    /// answers most questions in French.
    #[arg(long)]
    pub template_system: bool,
}

impl TemplateArgs {
    /// The model with the template these flags ask for.
    pub fn apply(&self, tm: Arc<TextModel>) -> Result<Arc<TextModel>> {
        let tm = match &self.chat_template {
            Some(spec) => Arc::new(tm.with_chat_template(spec)?),
            None => tm,
        };
        Ok(if self.template_system {
            Arc::new(tm.keeping_default_system(true))
        } else {
            tm
        })
    }
}

/// `-n` checked against the model's context: more new tokens than the context holds
/// is refused in one line (never an allocation of that size); without `-n`, `default`
/// new tokens, or the context's worth if that is smaller (a small trained model).
fn check_max_tokens(n: Option<i64>, default: usize, tm: &TextModel) -> Result<usize> {
    let context = tm.model.config.max_positions;
    let Some(n) = n else {
        return Ok(default.min(context));
    };
    if n < 0 || n as u64 > context as u64 {
        return Err(Error::Argument(format!(
            "-n/--max-tokens {n}: give 0 to {context} (the model's context holds {context} positions)"
        )));
    }
    Ok(n as usize)
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
            special: self.special,
            logit_bias: self.logit_bias.clone(),
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
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "An instruct model (SmolLM2) gets the prompt as a user message through its chat template; a base model (the packaged Gemma 3 270M has no template) continues the text.\n\nExamples:\n  lucent generate \"What is the capital of France?\"\n  lucent generate --raw --temperature 0 \"The capital of France is\" -n 16\n  lucent generate -m gemma3 \"The sky is blue because\" -n 60 --seed 1\n  lucent generate --template-system --temperature 0 \"What is the capital of France?\" -n 24\n  lucent generate -m runs/moby --top-p 0.9 \"Call me\"\n  lucent generate --temperature 0 --json-schema examples/city.schema.json \"Describe Paris as JSON.\"\n  lucent generate --temperature 0 --regex \"(yes|no)\" \"Is the sky blue? Answer yes or no.\"\n  lucent generate --temperature 0 --grammar examples/arithmetic.lark \"Write a sum of two numbers.\"\n  lucent generate --precision int8 --temperature 0 \"What is the capital of France?\" -n 24"
)]
pub struct Args {
    /// The prompt (an instruct model gets it as a user message; see --raw).
    pub prompt: String,
    /// Model: a known name (smollm2, gemma3), a .gguf file or a `lucent train` run folder.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// Most new tokens: 0 up to the model's context (SmolLM2: 8192) [default: 128, or
    /// the context if it holds fewer].
    #[arg(long = "max-tokens", short = 'n', allow_negative_numbers = true)]
    pub max_tokens: Option<i64>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub template: TemplateArgs,
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
    /// Wrap the prompt in the model's chat template (the default when it has one; an
    /// error for a base model without one, unless --chat-template gives one).
    #[arg(long)]
    pub chat: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// With --json: the K largest logits of the first step.
    #[arg(long, default_value_t = 0)]
    pub top_logits: usize,
    /// The precision of the model's products: exact (llama.cpp's arithmetic for a GGUF
    /// file), bf16 or int8 (weights widened once at load; faster in batches, and
    /// `lucent bench precision` measures how close to exact each lands).
    #[arg(long, default_value = "exact", value_parser = crate::commands::embed::parse_precision)]
    pub precision: lucent::Precision,
}

/// Run `lucent generate`.
pub fn run(args: Args) -> Result<()> {
    let model = loader::open_in(&args.model, args.precision)?;
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
    let precision = model.precision();
    let tm = args.template.apply(model.text_model()?)?;
    let max_tokens = check_max_tokens(args.max_tokens, 128, &tm)?;
    // `--chat` on a model without a template is refused by `encode_chat`, naming why.
    let chat = !args.raw && (args.chat || tm.template.is_some());
    let mut gen = Generator::new(tm);
    let ids = if chat {
        gen.encode_chat(&[Message::new("user", &args.prompt)])?
    } else {
        gen.encode(&args.prompt)?
    };
    let mut sampling = args.sampling.sampling(max_tokens);
    sampling.constrain = args.sampling.constrain.constraint(gen.model())?;
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
            "precision": precision.name(),
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
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Type a message and press Enter; /reset forgets the conversation, /exit (or Ctrl-D) ends; Ctrl-C stops a reply and keeps the conversation.\nThe model needs a chat template (SmolLM2 has one; a base model such as the packaged Gemma 3 needs --chat-template).\nExample: echo 'What is 2 + 2?' | lucent chat -m smollm2 --temperature 0"
)]
pub struct ChatArgs {
    /// Model: a known name (smollm2, gemma3) or a .gguf path.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// A system message to begin with [default: none].
    #[arg(long)]
    pub system: Option<String>,
    /// Most new tokens per reply: 0 up to the model's context [default: 512, or the
    /// context if it holds fewer].
    #[arg(long = "max-tokens", short = 'n', allow_negative_numbers = true)]
    pub max_tokens: Option<i64>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub template: TemplateArgs,
}

/// Set by Ctrl-C while a reply is being written ([`ReplyInterrupt`]).
static STOP_REPLY: AtomicBool = AtomicBool::new(false);

/// The SIGINT handler while a reply runs: ask the reply to stop (async-signal-safe: one
/// atomic store).
extern "C" fn on_interrupt(_: libc::c_int) {
    STOP_REPLY.store(true, Ordering::SeqCst);
}

/// While alive, Ctrl-C stops the reply being written instead of ending the process; on
/// drop, Ctrl-C ends the process again (at the prompt, as in a shell).
struct ReplyInterrupt;

impl ReplyInterrupt {
    fn arm() -> Self {
        STOP_REPLY.store(false, Ordering::SeqCst);
        #[cfg(unix)]
        // SAFETY: installs a handler that only stores to an atomic.
        unsafe {
            libc::signal(
                libc::SIGINT,
                on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
        ReplyInterrupt
    }

    fn stopped(&self) -> bool {
        STOP_REPLY.load(Ordering::SeqCst)
    }
}

impl Drop for ReplyInterrupt {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: restores the default disposition of SIGINT.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
    }
}

/// Run `lucent chat`: keeps the conversation; each turn prefills only what is new.
pub fn run_chat(args: ChatArgs) -> Result<()> {
    let tm = args.template.apply(loader::text_model(&args.model)?)?;
    let max_tokens = check_max_tokens(args.max_tokens, 512, &tm)?;
    if tm.template.is_none() {
        return Err(Error::Argument(format!(
            "{} has no chat template (tokenizer.chat_template): it is a base model that continues \
             text, not a chat model; use `lucent generate -m {} TEXT` to continue a text, or give \
             a template with --chat-template FILE|chatml|gemma",
            args.model, args.model
        )));
    }
    let mut gen = Generator::new(tm);
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
    let mut base = args.sampling.sampling(max_tokens);
    base.constrain = args.sampling.constrain.constraint(gen.model())?;
    base.validate()?;
    eprintln!(
        "[chat with {}: /reset forgets the conversation, /exit or Ctrl-D ends, Ctrl-C stops a reply]",
        args.model
    );
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
        cached.truncate(common);
        let mut sampling = base.clone();
        sampling.seed = sampling.seed.wrapping_add(turn);
        let interrupt = ReplyInterrupt::arm();
        let reply = write_reply(&mut gen, &ids[common..], &sampling, &interrupt);
        drop(interrupt);
        let (text, new_ids, stop) = match reply {
            Ok(r) => r,
            Err(e) => {
                eprintln!("\n[{e}]");
                messages.pop();
                gen.truncate(common);
                continue;
            }
        };
        println!();
        match stop {
            Some(StopReason::ContextFull(n)) => {
                eprintln!("[the context of {n} positions is full; /reset to start again]")
            }
            None => eprintln!("[reply stopped; the conversation keeps what was written]"),
            _ => {}
        }
        // The cache holds the prompt and each token fed to the model so far.
        cached = ids;
        cached.extend(&new_ids);
        cached.truncate(gen.cached());
        messages.push(Message::new("assistant", text.trim()));
        turn += 1;
    }
    Ok(())
}

/// Stream one reply to stdout until it ends or Ctrl-C stops it: its text, its ids, and
/// why it ended (None: stopped by the person).
fn write_reply(
    gen: &mut Generator,
    new_ids: &[u32],
    sampling: &Sampling,
    interrupt: &ReplyInterrupt,
) -> Result<(String, Vec<u32>, Option<StopReason>)> {
    let mut out = std::io::stdout().lock();
    let mut text = String::new();
    let mut stream = gen.stream_continue(new_ids, sampling)?;
    for piece in stream.by_ref() {
        let piece = piece?;
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
        text.push_str(&piece);
        if interrupt.stopped() {
            return Ok((text, stream.ids().to_vec(), None));
        }
    }
    Ok((text, stream.ids().to_vec(), stream.stop_reason().cloned()))
}
