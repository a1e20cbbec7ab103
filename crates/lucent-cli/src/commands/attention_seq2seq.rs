//! `lucent attention -m RUN INPUT` for an encoder-decoder trained by `lucent train
//! seq2seq`: the cross-attention of each decoder layer while it decodes the input
//! greedily (which input symbol each output symbol reads), as a heatmap.

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
