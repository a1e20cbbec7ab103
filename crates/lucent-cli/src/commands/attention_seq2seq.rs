//! `lucent attention -m RUN INPUT` for an encoder-decoder trained by `lucent train
//! seq2seq`: the cross-attention of each decoder layer while it decodes the input
//! greedily (which input symbol each output symbol reads), as a heatmap; and
//! `lucent attention -m whisper-tiny.en FILE.wav` for a speech model: the cross-attention
//! of each generated token over the audio's 1500 positions (20 ms each), where the
//! alignment shows as a diagonal band, through the model's `Trace`.

use std::path::PathBuf;

use lucent::{Error, Result};

/// What `lucent attention -m DIR INPUT` needs for a model trained by `lucent train seq2seq`.
pub struct AttentionArgs {
    /// The input sequence (the task's symbols).
    pub input: String,
    /// Heatmap file (PNG or SVG).
    pub out: PathBuf,
    /// Print JSON (output, weights) instead of the summary.
    pub json: bool,
    /// With `layer`: `cross`, `encoder` or `decoder` (default cross).
    pub stack: Option<String>,
    /// One layer's heads instead of every layer's mean cross-attention.
    pub layer: Option<usize>,
    /// With `layer`: one head (default: all).
    pub head: Option<usize>,
}

/// Show a trained encoder-decoder's cross-attention of each decoder layer as a heatmap.
pub fn run_attention(model: &lucent::Model, args: AttentionArgs) -> Result<()> {
    if args.layer.is_some() || args.stack.is_some() {
        return run_layer(model, args);
    }
    if model.transcriber().is_ok() {
        return run_speech(model, args);
    }
    let m = model.trained().ok_or_else(|| {
        Error::Argument(format!(
            "{} is not a model trained by `lucent train seq2seq`",
            model.name()
        ))
    })?;
    let (maps, rows, cols) = m.cross_attention(&args.input)?;
    let output = m.sample(&args.input, 0, 0.0, 0)?;
    let panels = maps
        .iter()
        .enumerate()
        .map(|(i, w)| {
            Ok(lucent::viz::Panel::from_tensor(
                format!("decoder layer {i}: cross-attention (mean over heads)"),
                w,
            )?
            .labels(rows.clone(), cols.clone())
            .axes("input (keys)", "output (queries)"))
        })
        .collect::<Result<Vec<_>>>()?;
    if panels.is_empty() {
        return Err(Error::Argument("the model has no decoder layers".into()));
    }
    lucent::viz::heatmap_grid(&panels, &args.out)?;
    if args.json {
        let w: Vec<Vec<Vec<f32>>> = maps.iter().map(|t| t.to_rows()).collect();
        println!(
            "{}",
            serde_json::json!({"input": args.input, "output": output, "cross_attention": w, "file": args.out})
        );
    } else {
        println!(
            "input  {}\noutput {output}\nheatmap: {}",
            args.input,
            args.out.display()
        );
    }
    Ok(())
}

/// A speech model's cross-attention (mean over heads, per decoder layer) of each token
/// of the first window's transcript over the audio positions it attends to.
fn run_speech(model: &lucent::Model, args: AttentionArgs) -> Result<()> {
    let trace = model.trace_with(&args.input, lucent::Trace::only(&["weights"]))?;
    let tokens = trace.target_tokens().to_vec();
    let layers = model.config().decoder_layers;
    // Show the audio up to a little past where the attention goes (the rest is padding).
    let mut maps = Vec::new();
    for i in 0..layers {
        let name = format!("decoder.layer.{i}.cross_attn.weights");
        let w = trace
            .get(&name)
            .ok_or_else(|| Error::Argument(format!("the trace has no {name}")))?;
        let [_, h, t, s] = w.dims()?;
        let mut mean = vec![0f32; t * s]; // (t, s)
        for hi in 0..h {
            for (m, x) in mean.iter_mut().zip(&w.data()[hi * t * s..(hi + 1) * t * s]) {
                *m += x / h as f32;
            }
        }
        maps.push((t, s, mean));
    }
    // Show the audio's own positions (20 ms each) and a little after: the rest of the
    // 30-s window is padding.
    let seconds = lucent::io::AudioStream::open(&args.input)?
        .info()
        .duration_secs();
    let s_all = maps.first().map_or(0, |m| m.1);
    let cols = lucent::pipeline::transcribe::audio_positions(seconds, s_all);
    let col_labels: Vec<String> = (0..cols)
        .map(|c| {
            if c % 50 == 0 {
                format!("{:.1}s", c as f64 * 0.02)
            } else {
                String::new()
            }
        })
        .collect();
    let panels = maps
        .iter()
        .enumerate()
        .map(|(i, (t, s, m))| {
            let rows: Vec<Vec<f32>> = (0..*t).map(|r| m[r * s..r * s + cols].to_vec()).collect();
            lucent::viz::Panel::new(
                format!("decoder layer {i}: cross-attention over the audio (mean over heads)"),
                rows,
            )
            .labels(tokens.clone(), col_labels.clone())
            .axes("audio position (20 ms)", "token (queries)")
        })
        .collect::<Vec<_>>();
    if panels.is_empty() {
        return Err(Error::Argument("the model has no decoder layers".into()));
    }
    lucent::viz::heatmap_grid(&panels, &args.out)?;
    let text: String = tokens
        .iter()
        .filter(|t| !t.starts_with("<|"))
        .cloned()
        .collect();
    if args.json {
        let w: Vec<Vec<Vec<f32>>> = maps
            .iter()
            .map(|(t, s, m)| (0..*t).map(|r| m[r * s..r * s + cols].to_vec()).collect())
            .collect();
        println!(
            "{}",
            serde_json::json!({"file": args.input, "tokens": tokens, "text": text.trim(), "cross_attention": w, "heatmap": args.out})
        );
    } else {
        println!(
            "audio  {}\ntext   {}\ntokens {}\nheatmap: {} (decoder layers × tokens × audio positions of 20 ms)",
            args.input,
            text.trim(),
            tokens.len(),
            args.out.display()
        );
    }
    Ok(())
}

/// One layer of one of an encoder-decoder's three attentions, per head: the weights of
/// the teacher-forced pass over the answer it decodes greedily (a speech model's audio
/// positions shown up to a little past the audio, as in the mean view).
fn run_layer(model: &lucent::Model, args: AttentionArgs) -> Result<()> {
    let stack = args.stack.as_deref().unwrap_or("cross");
    let c = model.config();
    let (prefix, layers) = match stack {
        "cross" => ("cross_attn", c.decoder_layers),
        "encoder" => ("attn", c.encoder_layers),
        "decoder" => ("attn", c.decoder_layers),
        other => {
            return Err(Error::Argument(format!(
                "--stack {other}: an encoder-decoder has cross, encoder and decoder attention"
            )))
        }
    };
    let layer = args.layer.unwrap_or(layers.saturating_sub(1));
    if layer >= layers {
        return Err(Error::Argument(format!(
            "--layer {layer}: the {stack} stack has {layers} layers (0..{})",
            layers.saturating_sub(1)
        )));
    }
    let side = if stack == "encoder" {
        "encoder"
    } else {
        "decoder"
    };
    let name = format!("{side}.layer.{layer}.{prefix}.weights");
    let trace = model.trace_with(
        &args.input,
        lucent::Trace::only(&["weights"]).in_layers(&[layer]),
    )?;
    let w = trace
        .get(&name)
        .ok_or_else(|| Error::Argument(format!("the trace has no {name}")))?;
    let [_, h, r, cols_all] = w.dims()?;
    let targets = trace.target_tokens().to_vec();
    // The source side: the input's tokens, or a speech model's audio positions.
    let sources: Vec<String> = if model.transcriber().is_ok() {
        let seconds = lucent::io::AudioStream::open(&args.input)?
            .info()
            .duration_secs();
        let all = if stack == "decoder" { 0 } else { cols_all };
        let keep = lucent::pipeline::transcribe::audio_positions(seconds, all);
        (0..keep)
            .map(|j| format!("{:.2}s", j as f64 * 0.02))
            .collect()
    } else {
        trace.tokens().to_vec()
    };
    let (row_labels, col_labels) = match stack {
        "encoder" => (sources.clone(), sources),
        "decoder" => (targets.clone(), targets),
        _ => (targets, sources),
    };
    let (rows, cols) = (row_labels.len().min(r), col_labels.len().min(cols_all));
    let heads: Vec<usize> = match args.head {
        Some(hh) if hh >= h => {
            return Err(Error::Argument(format!(
                "--head {hh}: the model has {h} heads (0..{})",
                h - 1
            )))
        }
        Some(hh) => vec![hh],
        None => (0..h).collect(),
    };
    let matrix = |hh: usize| -> Vec<Vec<f32>> {
        let m = &w.data()[hh * r * cols_all..(hh + 1) * r * cols_all];
        (0..rows)
            .map(|i| m[i * cols_all..i * cols_all + cols].to_vec())
            .collect()
    };
    let panels: Vec<lucent::viz::Panel> = heads
        .iter()
        .map(|&hh| {
            lucent::viz::Panel::new(
                format!("{stack} attention, layer {layer}, head {hh}"),
                matrix(hh),
            )
            .labels(row_labels[..rows].to_vec(), col_labels[..cols].to_vec())
            .axes("keys", "queries")
        })
        .collect();
    lucent::viz::heatmap_grid(&panels, &args.out)?;
    if args.json {
        let weights: Vec<serde_json::Value> = heads
            .iter()
            .map(|&hh| serde_json::json!({"head": hh, "matrix": matrix(hh)}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"input": args.input, "stack": stack, "layer": layer,
                "queries": &row_labels[..rows], "keys": &col_labels[..cols],
                "weights": weights, "heatmap": args.out})
        );
    } else {
        println!(
            "{stack} attention of layer {layer}: {} head(s) × {rows} queries × {cols} keys\nheatmap: {}",
            heads.len(),
            args.out.display()
        );
    }
    Ok(())
}
