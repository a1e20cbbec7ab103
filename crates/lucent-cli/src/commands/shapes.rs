//! `lucent shapes --preset transformer-base --batch 4 --seq 10`: the tensor shape after
//! every step of a forward pass.
//!
//! embedding (b, t, d) → Q/K/V (b, t, h·d_k) → split heads (b, h, t, d_k) → scores
//! (b, h, t, t) → weights → context (b, h, t, d_k) → merge heads (b, t, h·d_k) → W_O
//! (b, t, d) → residual (+ norm) → FFN (b, t, d_ff) → (b, t, d) → … → logits (b, t, V).

use lucent::model::forward_shapes;
use lucent::Result;

use crate::commands::numbers::at_least;
use crate::config_args::{describe, ConfigArgs};

/// Arguments of `lucent shapes`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent shapes --preset transformer-base --batch 4 --seq 10\n  lucent shapes --d-model 512 --heads 8 --d-ff 2048 --batch 4 --seq 10\n  lucent shapes --preset smollm2 --batch 1 --seq 16 --json"
)]
pub struct Args {
    #[command(flatten)]
    config: ConfigArgs,
    /// Batch size b.
    #[arg(long, short = 'b', default_value_t = 1, value_parser = at_least::<0, usize>)]
    batch: usize,
    /// Sequence length t (the target length for an encoder-decoder).
    #[arg(long, short = 't', value_name = "T", value_parser = at_least::<0, usize>)]
    seq: usize,
    /// Source length t_src for an encoder-decoder (default: --seq).
    #[arg(long, value_name = "T_SRC", value_parser = at_least::<0, usize>)]
    src_seq: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Run `lucent shapes`.
pub fn run(args: Args) -> Result<()> {
    let (label, cfg) = args.config.config()?;
    let steps = forward_shapes(&cfg, args.batch, args.seq, args.src_seq)?;
    if args.json {
        let v = serde_json::json!({ "model": label, "batch": args.batch, "seq": args.seq, "src_seq": args.src_seq, "steps": steps });
        println!("{v:#}");
        return Ok(());
    }
    println!("Forward pass of {label}: {}", describe(&cfg));
    println!(
        "b = {}, t = {}{}\n",
        args.batch,
        args.seq,
        args.src_seq
            .map_or(String::new(), |s| format!(", t_src = {s}"))
    );
    let name_w = steps
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .min(72);
    println!(
        "{:<9}{:>5}  {:<name_w$}  {:<22}shape",
        "stage", "× N", "step", "dims"
    );
    let mut last_stage = String::new();
    for s in &steps {
        if s.stage != last_stage && !last_stage.is_empty() {
            println!();
        }
        last_stage.clone_from(&s.stage);
        let shape = s
            .shape
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let rep = if s.repeat > 1 {
            format!("×{}", s.repeat)
        } else {
            String::new()
        };
        let shape = format!("({shape})");
        let note = if s.note.is_empty() {
            String::new()
        } else {
            format!("  {}", s.note)
        };
        let line = format!(
            "{:<9}{:>5}  {:<name_w$}  {:<22}{shape:<18}{note}",
            s.stage, rep, s.name, s.dims
        );
        println!("{}", line.trim_end());
    }
    println!("\n× N: the step runs once in each of the N layers, with the same shapes.");
    Ok(())
}
