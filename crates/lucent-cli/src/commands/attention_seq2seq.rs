//! `lucent attention -m RUN INPUT` for an encoder-decoder trained by `lucent train
//! seq2seq`: the cross-attention of each decoder layer while it decodes the input
//! greedily (which input symbol each output symbol reads), as a heatmap; and
//! `lucent attention -m whisper-tiny.en FILE.wav` for a speech model: the cross-attention
//! of each generated token over the audio's 1500 positions (20 ms each), where the
//! alignment shows as a diagonal band, through the model's `Trace`.
//!
//! With `--layer`, `--stack`, `--head`, `--token` or `--steps`, one layer's heads of one
//! of the three attentions (cross, encoder or decoder self-attention), as every model
//! kind shows them ([`super::attention_view`]). A speech model's audio axis is long
//! (1500 positions): its pictures are downsampled to stay within
//! [`lucent::viz::MAX_SIDE`] pixels a side, and say so on the picture; the JSON keeps
//! every position.

use std::path::PathBuf;

use lucent::viz::Panel;
use lucent::{Error, Result};

use super::attention_view::{self as view, HeadWeights, View};

/// What `lucent attention -m DIR INPUT` needs for an encoder-decoder.
pub struct AttentionArgs {
    /// The input sequence (the task's symbols), or a speech model's WAV file.
    pub input: String,
    /// Heatmap file (PNG or SVG).
    pub out: PathBuf,
    /// Print JSON instead of the summary.
    pub json: bool,
    /// `cross`, `encoder` or `decoder` (default cross).
    pub stack: Option<String>,
    /// One layer's heads instead of every layer's mean cross-attention.
    pub layer: Option<usize>,
    /// One head (default: all).
    pub head: Option<usize>,
    /// The query whose row to show: a token or a position.
    pub token: Option<String>,
    /// One head's arithmetic for the chosen query.
    pub steps: bool,
}

/// Show an encoder-decoder's attention: every layer's mean cross-attention, or with
/// any of `--layer`, `--stack`, `--head`, `--token`, `--steps` one layer's heads.
pub fn run_attention(model: &lucent::Model, args: AttentionArgs) -> Result<()> {
    let one_layer = args.layer.is_some()
        || args.stack.is_some()
        || args.head.is_some()
        || args.token.is_some()
        || args.steps;
    if one_layer {
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
            Ok(Panel::from_tensor(
                format!("decoder layer {i}: cross-attention (mean over heads)"),
                w,
            )?
            .labels(rows.clone(), cols.clone())
            .axes("input (keys)", "output (queries)")
            .units("output tokens", "input tokens"))
        })
        .collect::<Result<Vec<_>>>()?;
    if panels.is_empty() {
        return Err(Error::Argument("the model has no decoder layers".into()));
    }
    let drawn = lucent::viz::heatmap_grid(&panels, &args.out)?;
    let mut v = mean_view(model, &args, rows.clone(), cols, &maps_rows(&maps))?;
    v.extra.insert("output".into(), serde_json::json!(output));
    v.drew(&args.out, &drawn, true);
    if args.json {
        println!("{}", v.to_json());
    } else {
        println!(
            "input  {}\noutput {output}\nheatmap: {}{}",
            args.input,
            args.out.display(),
            notes_suffix(&drawn)
        );
    }
    Ok(())
}

/// Each (t, s) tensor as rows.
fn maps_rows(maps: &[lucent::Tensor]) -> Vec<Vec<Vec<f32>>> {
    maps.iter().map(|t| t.to_rows()).collect()
}

/// The mean view (every layer's cross-attention, the mean over its heads) in the one
/// JSON shape: `layer` null, one `heads` entry per layer with `head` null.
fn mean_view(
    model: &lucent::Model,
    args: &AttentionArgs,
    tokens: Vec<String>,
    keys: Vec<String>,
    maps: &[Vec<Vec<f32>>],
) -> Result<View> {
    let c = model.config();
    Ok(View {
        model: model.name().to_string(),
        kind: "encoder-decoder",
        stack: "cross".into(),
        layer: None,
        input: args.input.clone(),
        rows: (0..tokens.len()).collect(),
        tokens,
        keys,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        heads: maps
            .iter()
            .enumerate()
            .map(|(layer, m)| HeadWeights {
                layer,
                head: None,
                kv_head: None,
                weights: m.clone(),
            })
            .collect(),
        steps: None,
        extra: serde_json::Map::new(),
    })
}

/// " (frames: 1500 → 750, mean of 2)" after a file name, when the picture is downsampled.
fn notes_suffix(drawn: &lucent::viz::Drawn) -> String {
    if drawn.notes.is_empty() {
        String::new()
    } else {
        format!(" (downsampled: {})", drawn.notes.join("; "))
    }
}

/// A speech model's audio positions, 20 ms each: "0.00s", "0.02s", …
fn position_labels(n: usize) -> Vec<String> {
    (0..n).map(|j| format!("{:.2}s", j as f64 * 0.02)).collect()
}

/// A speech model's cross-attention (mean over heads, per decoder layer) of each token
/// of the first window's transcript over the audio positions it attends to.
fn run_speech(model: &lucent::Model, args: AttentionArgs) -> Result<()> {
    let trace = model.trace_with(&args.input, lucent::Trace::only(&["weights"]))?;
    let tokens = trace.target_tokens().to_vec();
    let layers = model.config().decoder_layers;
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
    let cropped: Vec<Vec<Vec<f32>>> = maps
        .iter()
        .map(|(t, s, m)| (0..*t).map(|r| m[r * s..r * s + cols].to_vec()).collect())
        .collect();
    let panels = cropped
        .iter()
        .enumerate()
        .map(|(i, rows)| {
            Panel::new(
                format!("decoder layer {i}: cross-attention over the audio (mean over heads)"),
                rows.clone(),
            )
            .labels(tokens.clone(), col_labels.clone())
            .axes("audio position (20 ms)", "token (queries)")
            .units("tokens", "frames")
        })
        .collect::<Vec<_>>();
    if panels.is_empty() {
        return Err(Error::Argument("the model has no decoder layers".into()));
    }
    let drawn = lucent::viz::heatmap_grid(&panels, &args.out)?;
    let text: String = tokens
        .iter()
        .filter(|t| !t.starts_with("<|"))
        .cloned()
        .collect();
    let mut v = mean_view(
        model,
        &args,
        tokens.clone(),
        position_labels(cols),
        &cropped,
    )?;
    v.extra
        .insert("text".into(), serde_json::json!(text.trim()));
    v.drew(&args.out, &drawn, true);
    if args.json {
        println!("{}", v.to_json());
    } else {
        println!(
            "audio  {}\ntext   {}\ntokens {}\nheatmap: {} (decoder layers × tokens × audio positions of 20 ms){}",
            args.input,
            text.trim(),
            tokens.len(),
            args.out.display(),
            notes_suffix(&drawn)
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
    let (attn, layers) = match stack {
        "cross" => ("cross_attn", c.decoder_layers),
        "encoder" => ("attn", c.encoder_layers),
        "decoder" => ("attn", c.decoder_layers),
        other => {
            return Err(Error::Argument(format!(
                "--stack {other}: an encoder-decoder has cross, encoder and decoder attention"
            )))
        }
    };
    let layer = view::layer(args.layer, layers, stack)?;
    let side = if stack == "encoder" {
        "encoder"
    } else {
        "decoder"
    };
    let prefix = format!("{side}.layer.{layer}.{attn}");
    let trace = model.trace_with(
        &args.input,
        lucent::Trace::only(view::leaves(args.steps)).in_layers(&[layer]),
    )?;
    let w = view::leaf(&trace, &prefix, "weights")?; // (1, h, r, cols_all)
    let [_, h, r, cols_all] = w.dims()?;
    let heads = view::heads(args.head, h)?;
    let targets = trace.target_tokens().to_vec();
    let speech = model.transcriber().is_ok();
    // The source side: the input's tokens, or a speech model's audio positions.
    let sources: Vec<String> = if speech {
        let seconds = lucent::io::AudioStream::open(&args.input)?
            .info()
            .duration_secs();
        let all = if stack == "decoder" { 0 } else { cols_all };
        position_labels(lucent::pipeline::transcribe::audio_positions(seconds, all))
    } else {
        trace.tokens().to_vec()
    };
    let (row_labels, col_labels) = match stack {
        "encoder" => (sources.clone(), sources),
        "decoder" => (targets.clone(), targets),
        _ => (targets, sources),
    };
    let (rows, cols) = (row_labels.len().min(r), col_labels.len().min(cols_all));
    let row_labels = row_labels[..rows].to_vec();
    let col_labels = col_labels[..cols].to_vec();
    let query = args
        .token
        .as_deref()
        .map(|s| view::find_token(&row_labels, s))
        .transpose()?;
    let matrix = |hh: usize, shown: &[usize]| -> Vec<Vec<f32>> {
        let m = &w.data()[hh * r * cols_all..(hh + 1) * r * cols_all];
        shown
            .iter()
            .map(|&i| m[i * cols_all..i * cols_all + cols].to_vec())
            .collect()
    };
    let every_row: Vec<usize> = (0..rows).collect();
    let shown_rows: Vec<usize> = query.map_or_else(|| every_row.clone(), |i| vec![i]);
    let group = (h / c.n_kv_heads.max(1)).max(1);
    let steps = if args.steps {
        let hh = args.head.unwrap_or(0);
        // Self-attention of the encoder: the first position; else the last token.
        let default = if stack == "encoder" {
            0
        } else {
            rows.saturating_sub(1)
        };
        Some(view::step_by_step(
            &trace,
            &prefix,
            hh,
            query.unwrap_or(default),
            group,
        )?)
    } else {
        None
    };
    let (row_unit, col_unit) = match (speech, stack) {
        (true, "encoder") => ("query frames", "key frames"),
        (true, "cross") => ("tokens", "frames"),
        _ => ("query tokens", "key tokens"),
    };
    let panels: Vec<Panel> = heads
        .iter()
        .map(|&hh| {
            Panel::new(
                format!("{stack} attention, layer {layer}, head {hh}"),
                matrix(hh, &every_row),
            )
            .labels(row_labels.clone(), col_labels.clone())
            .axes("keys", "queries")
            .units(row_unit, col_unit)
        })
        .collect();
    let drawn = lucent::viz::heatmap_grid(&panels, &args.out)?;
    let mut v = View {
        model: model.name().to_string(),
        kind: "encoder-decoder",
        stack: stack.to_string(),
        layer: Some(layer),
        input: args.input.clone(),
        tokens: row_labels.clone(),
        keys: col_labels.clone(),
        rows: shown_rows.clone(),
        n_heads: h,
        n_kv_heads: c.n_kv_heads,
        heads: heads
            .iter()
            .map(|&hh| HeadWeights {
                layer,
                head: Some(hh),
                kv_head: Some(hh / group),
                weights: matrix(hh, &shown_rows),
            })
            .collect(),
        steps,
        extra: serde_json::Map::new(),
    };
    v.drew(&args.out, &drawn, true);
    if args.json {
        println!("{}", v.to_json());
        return Ok(());
    }
    println!(
        "{stack} attention of layer {layer} of 0..{}: {} head(s) × {rows} queries × {cols} keys\nheatmap: {}{}\n",
        layers - 1,
        heads.len(),
        args.out.display(),
        notes_suffix(&drawn)
    );
    v.print(stack == "decoder");
    if let Some(s) = &v.steps {
        // Steps cover every key (a speech model's whole window), labelled all the way.
        let keys: Vec<String> = if speech && stack != "decoder" {
            position_labels(cols_all)
        } else {
            let mut k = col_labels.clone();
            k.extend((cols..cols_all).map(|j| j.to_string()));
            k
        };
        s.print(&row_labels, &keys);
    }
    Ok(())
}
