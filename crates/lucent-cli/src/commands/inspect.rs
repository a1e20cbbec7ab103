//! `lucent inspect FILE.gguf`: what a GGUF file holds (architecture, parameters, the
//! storage types of its tensors, hyper-parameters, RoPE, tokenizer, chat template) and
//! whether lucent runs it, or the key, type or architecture it refuses. Reads metadata
//! only. A thin caller of `lucent::pipeline::inspect`.

use lucent::model::memory::thousands;
use lucent::pipeline::inspect::{self, GgufReport};
use lucent::{Error, Result};

use crate::progress::Bars;

/// Arguments of `lucent inspect`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  lucent inspect smollm2\n  lucent inspect gemma3 --json")]
pub struct Args {
    /// The .gguf file, or a known GGUF model's name (smollm2, gemma3; fetched on first use).
    pub file: String,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,
}

/// Run `lucent inspect`.
pub fn run(args: Args) -> Result<()> {
    let path = lucent::io::fetch::resolve(&args.file, &mut Bars::default())?;
    if !path.is_file() {
        return Err(Error::Argument(format!(
            "{}: not a file; inspect reads a .gguf file (or a known GGUF model: smollm2, gemma3)",
            path.display()
        )));
    }
    let r = inspect::inspect_gguf(&path)?;
    if args.json {
        let v = serde_json::to_value(&r).map_err(|e| Error::Argument(e.to_string()))?;
        println!("{v:#}");
        return Ok(());
    }
    print_report(&r);
    Ok(())
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".to_string(), |x| x.to_string())
}

fn print_report(r: &GgufReport) {
    println!("{}", r.path);
    println!(
        "  GGUF v{}, {} bytes, architecture {}{}",
        r.gguf_version,
        thousands(r.file_bytes),
        opt(&r.architecture),
        r.name.as_ref().map_or(String::new(), |n| format!(" ({n})"))
    );
    println!(
        "  {} parameters in {} tensors",
        thousands(r.parameters),
        r.tensors
    );
    println!(
        "\n  {:<8}{:>9}{:>16}{:>16}",
        "type", "tensors", "parameters", "bytes"
    );
    for t in &r.types {
        println!(
            "  {:<8}{:>9}{:>16}{:>16}",
            t.dtype,
            t.tensors,
            thousands(t.params),
            thousands(t.bytes)
        );
    }
    let h = &r.hparams;
    println!("\n  context       {}", opt(&h.context_length));
    println!("  embedding     {}", opt(&h.embedding_length));
    println!("  layers        {}", opt(&h.block_count));
    println!(
        "  heads         {} (KV heads {}, head dim {})",
        opt(&h.head_count),
        opt(&h.head_count_kv),
        opt(&h.head_dim)
    );
    println!("  FFN           {}", opt(&h.feed_forward_length));
    if let Some(n) = h.expert_count {
        println!(
            "  experts       {n}, {} per token, each of width {}",
            opt(&h.expert_used_count),
            opt(&h.expert_feed_forward_length.or(h.feed_forward_length))
        );
    }
    println!("  vocabulary    {}", opt(&h.vocab_size));
    println!(
        "  RoPE          base {}, dimensions {}, scaling {}",
        opt(&r.rope.freq_base),
        opt(&r.rope.dimension_count),
        if r.rope.scaling.is_empty() {
            "none".to_string()
        } else {
            let keys: Vec<String> = r
                .rope
                .scaling
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            keys.join(", ")
        }
    );
    if let Some(computed) = &r.rope.computed {
        println!("  RoPE scaling  {computed} (as lucent computes it)");
    }
    println!(
        "  tokenizer     {} (pre-tokenizer {})",
        opt(&r.tokenizer.model),
        opt(&r.tokenizer.pre)
    );
    match &r.chat_template.first_line {
        Some(line) if r.chat_template.present => println!("  chat template yes: {line}"),
        _ if r.chat_template.present => println!("  chat template yes"),
        _ => println!("  chat template none"),
    }
    match (&r.family, &r.refusal) {
        (Some(f), _) if r.runs => println!("\n  lucent runs it (family {f})"),
        (_, Some(why)) => println!("\n  lucent does not run it: {why}"),
        _ => println!("\n  lucent does not run it"),
    }
}
