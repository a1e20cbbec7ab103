//! `lucent attention -m minilm -m minilm "The cat sat on the mat because it was tired"`:
//! the attention weights of a real model, per layer and head, with token labels.
//!
//! Weights(layer, head) = softmax(Q·Kᵀ / √d_k + mask), one row per query token. They come
//! out of the same fused attention kernel that serves `lucent embed` (it writes the
//! probabilities when a [`Trace`] asks for them). `--steps` shows the arithmetic of one
//! head for one token: its query q, the scores q·kⱼ, the scaling by 1/√d_k, the softmax,
//! and the weighted sum of values, recomputed by hand and checked against the kernel.

use std::path::PathBuf;

use lucent::nn::Trace;
use lucent::viz::{heatmap_grid_with, Panel};
use lucent::{Error, Result, Tensor};

/// Options of the model mode of `lucent attention`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent attention -m minilm \"The cat sat on the mat because it was tired\" --token it\n  lucent attention -m minilm \"The cat sat on the mat because it was tired\" --layer 2 --head 5 --token it --steps\n  lucent attention -m minilm \"The cat sat on the mat\" --png heads.png"
)]
pub struct ModelAttentionArgs {
    /// The text to run through the model.
    pub text: String,
    /// A model name (see `lucent models`) or a local folder in Hugging Face layout.
    #[arg(long, short = 'm', default_value = "minilm")]
    pub model: String,
    /// Layer to show, from 0 (default: the last).
    #[arg(long)]
    pub layer: Option<usize>,
    /// Head to show, from 0 (default: all heads; `--steps` uses head 0).
    #[arg(long)]
    pub head: Option<usize>,
    /// The query token whose row to show: a token string (`it`) or a position (`8`).
    #[arg(long)]
    pub token: Option<String>,
    /// Show the step-by-step arithmetic of one head for the chosen token.
    #[arg(long)]
    pub steps: bool,
    /// Write a heatmap grid of every head of the layer (PNG or SVG by extension).
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn find_token(tokens: &[String], spec: &str) -> Result<usize> {
    if let Ok(i) = spec.parse::<usize>() {
        if i < tokens.len() {
            return Ok(i);
        }
    }
    let want = spec.to_lowercase();
    tokens
        .iter()
        .position(|t| t.to_lowercase() == want)
        .ok_or_else(|| {
            Error::Argument(format!(
                "--token '{spec}' is not one of the tokens {tokens:?}; give a token or a position 0..{}",
                tokens.len()
            ))
        })
}

fn get<'a>(trace: &'a Trace, layer: usize, leaf: &str) -> Result<&'a Tensor> {
    let name = format!("encoder.layer.{layer}.attn.{leaf}");
    trace.get(&name).ok_or_else(|| {
        Error::Argument(format!(
            "the forward pass recorded no '{name}' (recorded: {:?})",
            trace.names().collect::<Vec<_>>()
        ))
    })
}

/// Row `i` of head `h` of a (1, h, r, c) tensor.
fn row(t: &Tensor, h: usize, i: usize) -> Result<Vec<f32>> {
    let [_, _, r, c] = t.dims()?;
    Ok(t.data()[(h * r + i) * c..][..c].to_vec())
}

fn bar(w: f32) -> String {
    "█".repeat((w * 30.0).round() as usize)
}

fn vec_preview(v: &[f32], n: usize) -> String {
    let s: Vec<String> = v.iter().take(n).map(|x| format!("{x:+.3}")).collect();
    if v.len() > n {
        format!("[{}, … ({} values)]", s.join(", "), v.len())
    } else {
        format!("[{}]", s.join(", "))
    }
}

/// Run the model mode: load, trace one forward pass, print / plot the weights.
pub fn run_model(model: &lucent::Model, args: ModelAttentionArgs) -> Result<()> {
    let embedder = model.embedder()?;
    let cfg = embedder.model().config.clone();
    let (n_layers, n_heads, d_k) = (cfg.encoder_layers, cfg.n_heads, cfg.head_dim);
    let layer = args.layer.unwrap_or(n_layers.saturating_sub(1));
    if layer >= n_layers {
        return Err(Error::Argument(format!(
            "--layer {layer} is out of range: the model has layers 0..{}",
            n_layers - 1
        )));
    }
    if let Some(h) = args.head {
        if h >= n_heads {
            return Err(Error::Argument(format!(
                "--head {h} is out of range: the model has heads 0..{}",
                n_heads - 1
            )));
        }
    }
    if args.text.trim().is_empty() {
        return Err(Error::Argument("give a non-empty text".into()));
    }
    let enc = embedder.tokenizer().encode(&args.text, true)?;
    let tokens = enc.tokens.clone();
    let t = tokens.len();
    let query = args
        .token
        .as_deref()
        .map(|s| find_token(&tokens, s))
        .transpose()?;
    let leaves: &[&str] = if args.steps {
        &["q", "k", "v", "scores", "scaled", "weights", "context"]
    } else {
        &["weights"]
    };
    let mut trace = Trace::only(leaves).in_layers(&[layer]);
    embedder.hidden_states(&[&enc], Some(&mut trace))?;
    let weights = get(&trace, layer, "weights")?; // (1, h, t, t)

    if let Some(path) = &args.png {
        let panels: Vec<Panel> = (0..n_heads)
            .map(|h| {
                let m: Vec<Vec<f32>> = (0..t).map(|i| row(weights, h, i)).collect::<Result<_>>()?;
                Ok(Panel::new(format!("head {h}"), m)
                    .labels(tokens.clone(), tokens.clone())
                    .axes("key", "query")
                    .range(0.0, 1.0))
            })
            .collect::<Result<_>>()?;
        let title = format!("{}: layer {layer} attention weights", embedder.name());
        heatmap_grid_with(&panels, 4, Some(&title), path)?;
        if !args.json {
            eprintln!("wrote {}", path.display());
        }
    }

    let steps = if args.steps {
        let h = args.head.unwrap_or(0);
        let i = query.unwrap_or(0);
        Some(step_by_step(&trace, layer, h, i, d_k)?)
    } else {
        None
    };

    if args.json {
        let heads: Vec<Vec<Vec<f32>>> = (0..n_heads)
            .map(|h| (0..t).map(|i| row(weights, h, i)).collect::<Result<_>>())
            .collect::<Result<_>>()?;
        let mut v = serde_json::json!({
            "model": embedder.name(),
            "text": args.text,
            "tokens": tokens,
            "layer": layer,
            "heads": n_heads,
            "weights": heads,
        });
        if let Some(s) = &steps {
            v["steps"] = s.to_json();
        }
        println!("{v}");
        return Ok(());
    }

    println!(
        "{}: layer {layer} of 0..{}, {n_heads} heads of d_k = {d_k}, {t} tokens\n",
        embedder.name(),
        n_layers - 1
    );
    let heads: Vec<usize> = match args.head {
        Some(h) => vec![h],
        None => (0..n_heads).collect(),
    };
    match (query, args.head) {
        (Some(i), Some(h)) => {
            println!("head {h}: where {:?} (position {i}) looks\n", tokens[i]);
            for (j, w) in row(weights, h, i)?.iter().enumerate() {
                println!("  {:>12} {w:.3} {}", tokens[j], bar(*w));
            }
        }
        (Some(i), None) => {
            println!(
                "where {:?} (position {i}) looks, one row per head:\n",
                tokens[i]
            );
            print!("{:>6}", "head");
            for tok in &tokens {
                print!("{:>9}", clip(tok, 8));
            }
            println!("{:>10}", "top");
            for &h in &heads {
                let r = row(weights, h, i)?;
                print!("{h:>6}");
                for w in &r {
                    print!("{w:>9.3}");
                }
                let top = argmax(&r);
                println!("{:>10}", clip(&tokens[top], 9));
            }
        }
        (None, _) => {
            for &h in &heads {
                println!("head {h} (rows: query, columns: key)");
                print!("{:>10}", "");
                for tok in &tokens {
                    print!("{:>8}", clip(tok, 7));
                }
                println!();
                for (i, q) in tokens.iter().enumerate() {
                    print!("{:>10}", clip(q, 9));
                    for w in row(weights, h, i)? {
                        print!("{w:>8.2}");
                    }
                    println!();
                }
                println!();
            }
        }
    }
    if let Some(s) = &steps {
        s.print(&tokens);
    }
    Ok(())
}

fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

/// The arithmetic of one head for one query token.
struct Steps {
    head: usize,
    token: usize,
    d_k: usize,
    q: Vec<f32>,
    scores: Vec<f32>,
    scaled: Vec<f32>,
    weights: Vec<f32>,
    context: Vec<f32>,
    by_hand_diff: f32,
}

fn step_by_step(trace: &Trace, layer: usize, h: usize, i: usize, d_k: usize) -> Result<Steps> {
    let q = row(get(trace, layer, "q")?, h, i)?;
    let k = get(trace, layer, "k")?; // (1, h, t, d_k)
    let v = get(trace, layer, "v")?; // (1, h, t, d_k)
    let [_, _, t, _] = k.dims()?;
    let scores = row(get(trace, layer, "scores")?, h, i)?;
    let scaled = row(get(trace, layer, "scaled")?, h, i)?;
    let weights = row(get(trace, layer, "weights")?, h, i)?;
    let context = row(get(trace, layer, "context")?, h, i)?;
    // Recompute by the formula and compare with what the kernel wrote.
    let mut diff = 0.0f32;
    let by_hand: Vec<f32> = (0..t)
        .map(|j| -> Result<f32> {
            let kj = row(k, h, j)?;
            Ok(q.iter().zip(&kj).map(|(a, b)| a * b).sum::<f32>() / (d_k as f32).sqrt())
        })
        .collect::<Result<_>>()?;
    let m = by_hand.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = by_hand.iter().map(|s| (s - m).exp()).collect();
    let z: f32 = e.iter().sum();
    for (j, w) in weights.iter().enumerate() {
        diff = diff.max((e[j] / z - w).abs());
    }
    let mut by_hand_context = vec![0.0f32; context.len()];
    for (j, w) in weights.iter().enumerate() {
        for (acc, x) in by_hand_context.iter_mut().zip(row(v, h, j)?) {
            *acc += w * x;
        }
    }
    for (a, b) in by_hand_context.iter().zip(&context) {
        diff = diff.max((a - b).abs());
    }
    Ok(Steps {
        head: h,
        token: i,
        d_k,
        q,
        scores,
        scaled,
        weights,
        context,
        by_hand_diff: diff,
    })
}

impl Steps {
    fn print(&self, tokens: &[String]) {
        let i = self.token;
        println!(
            "\nstep by step: head {}, query {:?} (position {i})\n",
            self.head, tokens[i]
        );
        println!(
            "1. query q = x·W_Qᵀ + b_Q (head slice): {}",
            vec_preview(&self.q, 6)
        );
        println!(
            "2. scores sⱼ = q·kⱼ; 3. scaled sⱼ/√d_k (√{} = {:.3}); 4. softmax → weights:",
            self.d_k,
            (self.d_k as f32).sqrt()
        );
        println!(
            "   {:>12} {:>9} {:>9} {:>8}",
            "key", "q·k", "scaled", "weight"
        );
        for (j, tok) in tokens.iter().enumerate() {
            println!(
                "   {tok:>12} {:>9.3} {:>9.3} {:>8.3} {}",
                self.scores[j],
                self.scaled[j],
                self.weights[j],
                bar(self.weights[j])
            );
        }
        println!("5. output Σⱼ weightⱼ·vⱼ: {}", vec_preview(&self.context, 6));
        println!(
            "   recomputed by hand from q, k, v: largest difference from the kernel {:.1e}",
            self.by_hand_diff
        );
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "head": self.head, "token": self.token, "d_k": self.d_k,
            "q": self.q, "scores": self.scores, "scaled": self.scaled,
            "weights": self.weights, "context": self.context,
            "by_hand_max_diff": self.by_hand_diff,
        })
    }
}
