//! `lucent attention -m smollm2 PROMPT [--layer L] [--head H] [--token T] [--steps]`:
//! the causal attention weights of a real decoder model on a prompt.
//!
//! Row i of a head's matrix is query token i's softmax over keys 0..=i (the causal mask
//! hides later tokens; local layers of Gemma also hide keys more than the window back).
//! With grouped-query attention several query heads read the same key/value head: their
//! queries differ, their keys and values are shared, and the output says which.
//! `--token` and `--steps` work as for encoders ([`super::attention_view`]).

use std::path::PathBuf;

use lucent::nn::Trace;
use lucent::viz::{heatmap_grid_with, Panel};
use lucent::{Error, Result};

use super::attention_view::{self as view, HeadWeights, View};

/// What the decoder mode of `lucent attention` needs.
pub struct DecoderArgs {
    /// The prompt.
    pub prompt: String,
    /// The layer to show (default: the last).
    pub layer: Option<usize>,
    /// Show only this query head (default: every head of the layer).
    pub head: Option<usize>,
    /// The query token whose row to show: a token (`cat`) or a position.
    pub token: Option<String>,
    /// Show one head's arithmetic for the chosen token (default: the last token).
    pub steps: bool,
    /// Also draw the heads as heatmaps into this .png or .svg file.
    pub png: Option<PathBuf>,
    /// Print JSON instead of tables.
    pub json: bool,
}

/// Run `lucent attention -m smollm2`.
pub fn run_decoder(model: &lucent::Model, args: DecoderArgs) -> Result<()> {
    let tm = model.text_model()?;
    let cfg = &tm.model.config;
    let layer = view::layer(args.layer, cfg.decoder_layers, "decoder")?;
    let (h, h_kv) = (cfg.n_heads, cfg.n_kv_heads);
    let heads = view::heads(args.head, h)?;
    let ids = tm.encode(&args.prompt)?;
    if ids.is_empty() {
        return Err(Error::Argument("give a non-empty prompt".into()));
    }
    let labels: Vec<String> = ids
        .iter()
        .map(|&i| {
            tm.tokenizer
                .decode_ids(&[i], false)
                .unwrap_or_default()
                .replace('\n', "\\n")
        })
        .collect();
    let query = args
        .token
        .as_deref()
        .map(|s| view::find_token(&labels, s))
        .transpose()?;
    let mut trace = Trace::only(view::leaves(args.steps)).in_layers(&[layer]);
    tm.model.forward(&ids, None, true, Some(&mut trace))?;
    let prefix = format!("decoder.layer.{layer}.attn");
    let w = view::leaf(&trace, &prefix, "weights")?; // (1, h, t, t)
    let [_, _, t, _] = w.dims()?;
    let group = h / h_kv.max(1);
    let sharing: Vec<String> = (0..h_kv)
        .map(|k| {
            let heads: Vec<String> = (k * group..(k + 1) * group)
                .map(|j| j.to_string())
                .collect();
            format!("heads {} share kv head {k}", heads.join(","))
        })
        .collect();
    let rows: Vec<usize> = match query {
        Some(i) => vec![i],
        None => (0..t).collect(),
    };
    let shown = heads
        .iter()
        .map(|&hh| {
            Ok(HeadWeights {
                layer,
                head: Some(hh),
                kv_head: Some(hh / group),
                weights: rows
                    .iter()
                    .map(|&i| view::row(w, hh, i))
                    .collect::<Result<_>>()?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // The last token sees every other: the default row to take apart.
    let steps = if args.steps {
        let hh = args.head.unwrap_or(0);
        let i = query.unwrap_or(t - 1);
        Some(view::step_by_step(&trace, &prefix, hh, i, group)?)
    } else {
        None
    };
    let window = cfg.window_of_layer(layer);
    let mut extra = serde_json::Map::new();
    extra.insert("ids".into(), serde_json::json!(ids));
    extra.insert("kv_sharing".into(), serde_json::json!(sharing));
    extra.insert("window".into(), serde_json::json!(window));
    let mut v = View {
        model: model.name().to_string(),
        kind: "decoder",
        stack: "decoder".into(),
        layer: Some(layer),
        input: args.prompt.clone(),
        tokens: labels.clone(),
        keys: labels.clone(),
        rows,
        n_heads: h,
        n_kv_heads: h_kv,
        heads: shown,
        steps,
        extra,
    };
    if let Some(path) = &args.png {
        let panels: Vec<Panel> = heads
            .iter()
            .map(|&hh| {
                let m: Vec<Vec<f32>> =
                    (0..t).map(|i| view::row(w, hh, i)).collect::<Result<_>>()?;
                Ok(Panel::new(format!("head {hh} (kv {})", hh / group), m)
                    .labels(labels.clone(), labels.clone())
                    .axes("key", "query")
                    .units("query tokens", "key tokens")
                    .range(0.0, 1.0))
            })
            .collect::<Result<_>>()?;
        let title = match args.head {
            Some(hh) => format!("{} layer {layer}: {}", cfg.family, sharing[hh / group]),
            None => format!(
                "{} layer {layer}: {h} query heads, {h_kv} kv heads ({group} per kv head)",
                cfg.family
            ),
        };
        let drawn = heatmap_grid_with(&panels, panels.len().clamp(1, 3), Some(&title), path)?;
        v.drew(path, &drawn, args.json);
    }
    if args.json {
        println!("{}", v.to_json());
        return Ok(());
    }
    println!(
        "{} layer {layer} of 0..{}: {h} query heads, {h_kv} key/value heads ({}){}\n",
        cfg.family,
        cfg.decoder_layers - 1,
        sharing.join("; "),
        window.map_or(String::new(), |w| format!(", sliding window {w}"))
    );
    v.print(true);
    if let Some(s) = &v.steps {
        s.print(&labels, &labels);
    }
    Ok(())
}
