//! `lucent attention -m minilm "The cat sat on the mat because it was tired"`: the
//! attention weights of a real encoder, per layer and head, with token labels.
//!
//! Weights(layer, head) = softmax(Q·Kᵀ / √d_k + mask), one row per query token. They come
//! out of the same fused attention kernel that serves `lucent embed` (it writes the
//! probabilities when a [`Trace`] asks for them). `--steps` shows the arithmetic of one
//! head for one token ([`super::attention_view::step_by_step`], shared with decoders
//! and encoder-decoders).

use std::path::PathBuf;

use lucent::nn::Trace;
use lucent::viz::{heatmap_grid_with, Panel};
use lucent::{Error, Result};

use super::attention_view::{self as view, HeadWeights, View};

/// What the encoder mode of `lucent attention` needs.
pub struct ModelAttentionArgs {
    /// The text to run through the model.
    pub text: String,
    /// Layer to show, from 0 (default: the last).
    pub layer: Option<usize>,
    /// Head to show, from 0 (default: all heads; `--steps` uses head 0).
    pub head: Option<usize>,
    /// The query token whose row to show: a token string (`it`) or a position (`8`).
    pub token: Option<String>,
    /// Show the step-by-step arithmetic of one head for the chosen token.
    pub steps: bool,
    /// Write a heatmap grid of the heads shown (PNG or SVG by extension).
    pub png: Option<PathBuf>,
    /// Print JSON.
    pub json: bool,
}

/// Run the encoder mode: load, trace one forward pass, print / plot the weights.
pub fn run_model(model: &lucent::Model, args: ModelAttentionArgs) -> Result<()> {
    let embedder = model.embedder()?;
    let cfg = embedder.model().config.clone();
    let (n_layers, n_heads) = (cfg.encoder_layers, cfg.n_heads);
    let layer = view::layer(args.layer, n_layers, "encoder")?;
    let heads = view::heads(args.head, n_heads)?;
    if args.text.trim().is_empty() {
        return Err(Error::Argument("give a non-empty text".into()));
    }
    let enc = embedder.tokenizer().encode(&args.text, true)?;
    let tokens = enc.tokens.clone();
    let t = tokens.len();
    let query = args
        .token
        .as_deref()
        .map(|s| view::find_token(&tokens, s))
        .transpose()?;
    let mut trace = Trace::only(view::leaves(args.steps)).in_layers(&[layer]);
    embedder.hidden_states(&[&enc], Some(&mut trace))?;
    let prefix = format!("encoder.layer.{layer}.attn");
    let weights = view::leaf(&trace, &prefix, "weights")?; // (1, h, t, t)
    let rows: Vec<usize> = match query {
        Some(i) => vec![i],
        None => (0..t).collect(),
    };
    let shown = heads
        .iter()
        .map(|&h| {
            Ok(HeadWeights {
                layer,
                head: Some(h),
                kv_head: Some(h),
                weights: rows
                    .iter()
                    .map(|&i| view::row(weights, h, i))
                    .collect::<Result<_>>()?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let steps = if args.steps {
        let h = args.head.unwrap_or(0);
        Some(view::step_by_step(
            &trace,
            &prefix,
            h,
            query.unwrap_or(0),
            1,
        )?)
    } else {
        None
    };
    let mut v = View {
        model: model.name().to_string(),
        kind: "encoder",
        stack: "encoder".into(),
        layer: Some(layer),
        input: args.text.clone(),
        tokens: tokens.clone(),
        keys: tokens.clone(),
        rows,
        n_heads,
        n_kv_heads: n_heads,
        heads: shown,
        steps,
        extra: serde_json::Map::new(),
    };

    if let Some(path) = &args.png {
        // The whole matrix of each head shown (the picture shows every query).
        let panels: Vec<Panel> = heads
            .iter()
            .map(|&h| {
                let m: Vec<Vec<f32>> = (0..t)
                    .map(|i| view::row(weights, h, i))
                    .collect::<Result<_>>()?;
                Ok(Panel::new(format!("head {h}"), m)
                    .labels(tokens.clone(), tokens.clone())
                    .axes("key", "query")
                    .units("query tokens", "key tokens")
                    .range(0.0, 1.0))
            })
            .collect::<Result<_>>()?;
        let title = format!("{}: layer {layer} attention weights", embedder.name());
        let drawn = heatmap_grid_with(&panels, 4, Some(&title), path)?;
        v.drew(path, &drawn, args.json);
    }

    if args.json {
        println!("{}", v.to_json());
        return Ok(());
    }
    println!(
        "{}: layer {layer} of 0..{}, {n_heads} heads of d_k = {}, {t} tokens\n",
        embedder.name(),
        n_layers - 1,
        cfg.head_dim
    );
    v.print(false);
    if let Some(s) = &v.steps {
        s.print(&tokens, &tokens);
    }
    Ok(())
}
