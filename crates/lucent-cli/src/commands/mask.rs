//! `lucent mask`: which tokens each position may attend to, for the classic masks.
//!
//! bidirectional (BERT): every position sees every position;
//! causal (GPT): position i sees 0..=i;
//! prefix (T5's prefix-LM): the first P positions see each other, then causal.
//! Attention adds the mask as a bias: 0 where visible, −∞ where hidden.

use std::path::PathBuf;

use lucent::nn::mask::{bidirectional_mask, causal_mask, prefix_lm_mask, Mask};
use lucent::viz::{heatmap, heatmap_grid, Panel};
use lucent::{Error, Result};

use crate::commands::numbers::at_least;
use crate::show::{count, labels};

/// Which mask to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Encoders (BERT): every position sees every position.
    Bidirectional,
    /// Decoders (GPT): position i sees positions 0..=i.
    Causal,
    /// Prefix LM (T5): the first --prefix positions see each other; then causal.
    Prefix,
}

/// Arguments of `lucent mask`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(after_help = "\
Examples:
  lucent mask --kind causal --len 5
  lucent mask --kind prefix --tokens \"Translate : the cat sat\" --prefix 3
  lucent mask --kind bidirectional --tokens \"The cat sat\" --png bert.png
  lucent mask --compare --len 6 --png masks.png     BERT vs GPT vs T5 side by side
  lucent mask --kind causal --len 4 --json")]
pub struct Args {
    /// The mask: bidirectional (BERT), causal (GPT) or prefix (T5 prefix-LM).
    #[arg(long, value_enum, default_value = "causal")]
    kind: Kind,
    /// Sequence length (default: the number of --tokens).
    #[arg(long, short = 'n', value_name = "N", value_parser = at_least::<0, usize>)]
    len: Option<usize>,
    /// Length of the bidirectional prefix for --kind prefix (default: half the length, rounded up).
    #[arg(long, value_name = "P", value_parser = at_least::<0, usize>)]
    prefix: Option<usize>,
    /// Words to label the positions with, e.g. "The cat sat" (split on spaces) [default:
    /// none: positions are numbered].
    #[arg(long)]
    tokens: Option<String>,
    /// Show all three masks (bidirectional, causal, prefix) side by side.
    #[arg(long)]
    compare: bool,
    /// Draw the mask(s) to this file (.png or .svg).
    #[arg(long, value_name = "FILE")]
    png: Option<PathBuf>,
    /// Print JSON instead of the matrix.
    #[arg(long)]
    json: bool,
}

fn build(kind: Kind, len: usize, prefix: usize) -> Result<Mask> {
    match kind {
        Kind::Bidirectional => bidirectional_mask(len),
        Kind::Causal => causal_mask(len),
        Kind::Prefix => prefix_lm_mask(len, prefix),
    }
}

fn title(kind: Kind, prefix: usize) -> String {
    match kind {
        Kind::Bidirectional => "bidirectional (BERT)".into(),
        Kind::Causal => "causal (GPT)".into(),
        Kind::Prefix => format!("prefix-LM, prefix {prefix} (T5)"),
    }
}

/// Run `lucent mask`.
pub fn run(args: Args) -> Result<()> {
    let tokens: Vec<String> = args
        .tokens
        .as_deref()
        .map(|t| t.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let len = match (args.len, tokens.len()) {
        (Some(n), 0) => n,
        (Some(n), k) if n != k => {
            return Err(Error::Argument(format!(
                "--len {n} but --tokens has {}; give one of them, or make them agree",
                count(k, "word", "words")
            )))
        }
        (Some(n), _) => n,
        (None, 0) => {
            return Err(Error::Argument(
                "give --len N or --tokens \"some words\"".into(),
            ))
        }
        (None, k) => k,
    };
    if len == 0 {
        return Err(Error::Argument("--len must be at least 1".into()));
    }
    let prefix = args.prefix.unwrap_or(len.div_ceil(2).min(len));
    let kinds: Vec<Kind> = if args.compare {
        vec![Kind::Bidirectional, Kind::Causal, Kind::Prefix]
    } else {
        vec![args.kind]
    };
    let masks: Vec<Mask> = kinds
        .iter()
        .map(|&k| build(k, len, prefix))
        .collect::<Result<_>>()?;
    let names = labels(&tokens, len);

    if let Some(path) = &args.png {
        let panels: Vec<Panel> = kinds
            .iter()
            .zip(&masks)
            .map(|(&k, m)| {
                Ok(Panel::from_tensor(title(k, prefix), &m.to_float(0)?)?
                    .labels(names.clone(), names.clone())
                    .axes("key (attended to)", "query (attending)")
                    .range(0.0, 1.0))
            })
            .collect::<Result<_>>()?;
        if panels.len() == 1 {
            heatmap(&panels[0], path)?;
        } else {
            heatmap_grid(&panels, path)?;
        }
    }

    if args.json {
        let list: Vec<serde_json::Value> = kinds
            .iter()
            .zip(&masks)
            .map(|(&k, m)| {
                serde_json::json!({
                    "kind": format!("{k:?}").to_lowercase(),
                    "prefix": (k == Kind::Prefix).then_some(prefix),
                    "len": len,
                    "tokens": names,
                    "mask": m.matrix(0).iter().map(|r| r.iter().map(|&b| u8::from(b)).collect::<Vec<_>>()).collect::<Vec<_>>(),
                    "can_see": (0..len).map(|i| m.visible_keys(0, i)).collect::<Vec<_>>(),
                })
            })
            .collect();
        let v = if args.compare {
            serde_json::json!(list)
        } else {
            list[0].clone()
        };
        println!("{v:#}");
        return Ok(());
    }

    let w = names
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(1)
        .max(1)
        + 1;
    for (&k, m) in kinds.iter().zip(&masks) {
        println!(
            "{} mask, {}  (✓ = may attend, · = hidden)\n",
            title(k, prefix),
            count(len, "position", "positions")
        );
        print!("  {:w$}", "");
        for n in &names {
            print!(" {n:>w$}");
        }
        println!();
        for (i, row) in m.matrix(0).iter().enumerate() {
            print!("  {:<w$}", names[i]);
            for &b in row {
                print!(" {:>w$}", if b { "✓" } else { "·" });
            }
            println!();
        }
        println!();
        for i in 0..len {
            let seen: Vec<&str> = m
                .visible_keys(0, i)
                .into_iter()
                .map(|j| names[j].as_str())
                .collect();
            println!(
                "  position {i} ({}) can see [{}]",
                names[i],
                seen.join(", ")
            );
        }
        println!();
    }
    println!("In attention the mask is added to the scaled scores: 0 where ✓, −∞ where ·,");
    println!("so softmax gives the hidden positions exactly zero weight.");
    if let Some(path) = &args.png {
        println!("\nWrote {}", path.display());
    }
    Ok(())
}
