//! `lucent attention -m smollm2 PROMPT [--layer L] [--head H] [--png FILE]`:
//! the causal attention weights of a real decoder model on a prompt.
//!
//! Row i of a head's matrix is query token i's softmax over keys 0..=i (the causal mask
//! hides later tokens; local layers of Gemma also hide keys more than the window back).
//! With grouped-query attention several query heads read the same key/value head: their
//! queries differ, their keys and values are shared, and the output says which.

use std::path::PathBuf;

use lucent::nn::Trace;
use lucent::viz::{heatmap_grid_with, Panel};
use lucent::{Error, Result};

/// Arguments of `lucent attention -m smollm2`.
#[derive(clap::Args)]
#[command(
    after_help = "Example: lucent attention -m smollm2 \"The cat sat on the mat\" --layer 3 --png attn.png"
)]
pub struct DecoderArgs {
    /// The prompt.
    pub prompt: String,
    /// Model: a known name (smollm2, gemma3) or a .gguf path.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// The layer to show (0-based).
    #[arg(long, default_value_t = 0)]
    pub layer: usize,
    /// Show only this query head (default: every head of the layer).
    #[arg(long)]
    pub head: Option<usize>,
    /// Also draw the heads as heatmaps into this .png or .svg file.
    #[arg(long)]
    pub png: Option<PathBuf>,
    /// Print JSON (tokens, kv sharing, weights) instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Run `lucent attention -m smollm2`.
pub fn run_decoder(model: &lucent::Model, args: DecoderArgs) -> Result<()> {
    let tm = model.text_model()?;
    let cfg = &tm.model.config;
    if args.layer >= cfg.decoder_layers {
        return Err(Error::Argument(format!(
            "--layer {} but the model has {} layers (0..{})",
            args.layer,
            cfg.decoder_layers,
            cfg.decoder_layers - 1
        )));
    }
    let (h, h_kv) = (cfg.n_heads, cfg.n_kv_heads);
    if let Some(hh) = args.head {
        if hh >= h {
            return Err(Error::Argument(format!(
                "--head {hh} but the layer has {h} query heads (0..{})",
                h - 1
            )));
        }
    }
    let ids = tm.encode(&args.prompt)?;
    let labels: Vec<String> = ids
        .iter()
        .map(|&i| {
            tm.tokenizer
                .decode_ids(&[i], false)
                .unwrap_or_default()
                .replace('\n', "\\n")
        })
        .collect();
    let mut trace = Trace::only(&["weights"]).in_layers(&[args.layer]);
    tm.model.forward(&ids, None, true, Some(&mut trace))?;
    let name = format!("decoder.layer.{}.attn.weights", args.layer);
    let w = trace
        .get(&name)
        .ok_or_else(|| Error::Argument(format!("the forward pass recorded no '{name}'")))?; // (1, h, t, t)
    let [_, _, t, _] = w.dims()?;
    let group = h / h_kv;
    let sharing: Vec<String> = (0..h_kv)
        .map(|k| {
            let heads: Vec<String> = (k * group..(k + 1) * group)
                .map(|j| j.to_string())
                .collect();
            format!("heads {} share kv head {k}", heads.join(","))
        })
        .collect();
    let heads: Vec<usize> = match args.head {
        Some(hh) => vec![hh],
        None => (0..h).collect(),
    };
    let matrix = |hh: usize| -> Vec<Vec<f32>> {
        let d = w.data();
        (0..t)
            .map(|i| d[(hh * t + i) * t..(hh * t + i + 1) * t].to_vec())
            .collect()
    };
    let window = cfg.window_of_layer(args.layer);
    if args.json {
        let v = serde_json::json!({
            "model": tm.path.file_name().map(|n| n.to_string_lossy().into_owned()),
            "layer": args.layer,
            "ids": ids,
            "tokens": labels,
            "heads": h,
            "kv_heads": h_kv,
            "kv_sharing": sharing,
            "window": window,
            "weights": heads.iter().map(|&hh| serde_json::json!({"head": hh, "kv_head": hh / group, "matrix": matrix(hh)})).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else {
        println!(
            "{} layer {} of {}: {h} query heads, {h_kv} key/value heads ({}){}",
            cfg.family,
            args.layer,
            cfg.decoder_layers,
            sharing.join("; "),
            window.map_or(String::new(), |w| format!(", sliding window {w}"))
        );
        let width = 9;
        let short = |s: &str| -> String { s.chars().take(width - 1).collect() };
        for &hh in &heads {
            println!(
                "\nhead {hh} (kv head {}): row = query, column = key",
                hh / group
            );
            print!("{:>width$} ", "");
            for l in &labels {
                print!("{:>width$}", short(l));
            }
            println!();
            for (i, row) in matrix(hh).iter().enumerate() {
                print!("{:>width$} ", short(&labels[i]));
                for (j, v) in row.iter().enumerate() {
                    if j > i {
                        print!("{:>width$}", "·");
                    } else {
                        print!("{:>width$.3}", v);
                    }
                }
                println!();
            }
        }
    }
    if let Some(path) = &args.png {
        let panels: Vec<Panel> = heads
            .iter()
            .map(|&hh| {
                Panel::new(format!("head {hh} (kv {})", hh / group), matrix(hh))
                    .labels(labels.clone(), labels.clone())
                    .axes("key", "query")
                    .range(0.0, 1.0)
            })
            .collect();
        let title = match args.head {
            Some(hh) => format!(
                "{} layer {}: {}",
                cfg.family,
                args.layer,
                sharing[hh / group]
            ),
            None => format!(
                "{} layer {}: {h} query heads, {h_kv} kv heads ({group} per kv head)",
                cfg.family, args.layer
            ),
        };
        heatmap_grid_with(&panels, panels.len().clamp(1, 3), Some(&title), path)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
