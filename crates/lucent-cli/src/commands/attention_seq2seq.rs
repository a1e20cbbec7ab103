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
}

/// Show a trained encoder-decoder's cross-attention of each decoder layer as a heatmap.
pub fn run_attention(model: &lucent::Model, args: AttentionArgs) -> Result<()> {
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
    let cols = ((seconds / 0.02).ceil() as usize + 25).min(s_all);
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
