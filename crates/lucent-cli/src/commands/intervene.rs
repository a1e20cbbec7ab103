//! `lucent ablate`, `lucent patch`, `lucent steer` and `lucent attribute`: interventions at a decoder's hook
//! points (TransformerLens's names), through the library's `Model::intervene`.
//!
//! - ablate: zero (or mean) the output of attention heads (`blocks.L.attn.hook_z`, one
//!   head) and report the change in the log-probability of a target next token; `--sweep`
//!   does every head of every layer in turn (a layer × head heatmap with `--png`).
//! - patch: activation patching, layer × position: the corrupted text's run with the
//!   clean text's vector written at one layer's hook point and one position; how much of
//!   the clean log-probability of the target that restores.
//! - steer: generate with a steering vector added to the residual stream after a layer
//!   (`blocks.L.hook_resid_post`), the vector read from a file or made from contrasting
//!   prompts (their mean difference at the last position).
//! - attribute: direct logit attribution, printed from the library's
//!   `Model::logit_attribution` (the sweep of `ablate` is `Model::head_ablation_sweep`).

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use lucent::viz::{heatmap, ColorMap, Panel};
use lucent::{Error, HeadAblation, Intervention, Model, Result, Sampling};

use crate::loader;

/// `lucent ablate`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "The target defaults to the model's greedy next token. Head L.H is zero-ablated by writing zeros into its rows of blocks.L.attn.hook_z (its output before the output projection); --mean writes the mean over the text's positions instead.\n\nExamples:\n  lucent ablate \"The Eiffel Tower is in\" --target \" Paris\" --heads 0.3,5.1\n  lucent ablate \"The Eiffel Tower is in\" --sweep --layers 26-29 --png heads.png\n  lucent ablate -m smollm2 \"The capital of France is\" --heads 29.4 --mean --json\n  lucent ablate \"The Eiffel Tower is in\" --intervene '{\"hook\":\"blocks.3.mlp.hook_post\",\"op\":\"zero\"}'"
)]
pub struct AblateArgs {
    /// Model name or path (a decoder).
    #[arg(short, long, default_value = "smollm2")]
    pub model: String,
    /// The text whose next token is watched (the prompt as is, no chat template).
    pub text: String,
    /// The next token to watch, as text (e.g. " Paris", with its leading space); it
    /// must be one token [default: the model's greedy next token].
    #[arg(long, allow_hyphen_values = true)]
    pub target: Option<String>,
    /// Heads to ablate together, as LAYER.HEAD,... (e.g. 0.3,5.1) [default: every head
    /// of --layers, one at a time].
    #[arg(long, value_delimiter = ',', conflicts_with = "sweep")]
    pub heads: Vec<String>,
    /// Any interventions instead of head ablations: a JSON object or array
    /// ({"hook": NAME, "op": zero|mean|add|set|scale|patch, "head", "unit", "positions",
    /// "keys", "value", "from"}; docs/interventions.md), or @FILE holding one [default:
    /// none].
    #[arg(long, value_name = "JSON|@FILE", conflicts_with = "heads")]
    pub intervene: Option<String>,
    /// Ablate every head of every layer in turn, one at a time (the default without
    /// --heads).
    #[arg(long)]
    pub sweep: bool,
    /// With --sweep: only these layers, FIRST-LAST (e.g. 20-29) [default: all].
    #[arg(long, value_name = "FIRST-LAST")]
    pub layers: Option<String>,
    /// Mean-ablate (each head's mean over the text's positions) instead of zeroing.
    #[arg(long)]
    pub mean: bool,
    /// Print JSON: model, text, target, target_id, plain_logprob, op and results
    /// [{heads, interventions, logprob, delta, top_token}] (with --sweep one per head).
    #[arg(long)]
    pub json: bool,
    /// With --sweep: write a layer × head heatmap of the change in log-probability.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

/// `lucent patch`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Both texts must have the same number of tokens. For each layer L and position p, the corrupted text runs with the clean run's vector at the hook point of layer L written at position p (blocks.L.hook_resid_pre by default); the table shows how much of the gap in log p(target) that restores: 0 = the corrupted run, 1 = the clean run.\n\nExamples:\n  lucent patch --clean \"The capital of France is\" --corrupt \"The capital of Spain is\"\n  lucent patch --clean \"Paris is in\" --corrupt \"Rome is in\" --target \" France\" --png patch.png\n  lucent patch --clean \"Paris is in\" --corrupt \"Rome is in\" --hook mlp_out --json"
)]
pub struct PatchArgs {
    /// Model name or path (a decoder).
    #[arg(short, long, default_value = "smollm2")]
    pub model: String,
    /// The clean text (whose values are patched in).
    #[arg(long)]
    pub clean: String,
    /// The corrupted text (the run patched), of as many tokens as the clean one.
    #[arg(long)]
    pub corrupt: String,
    /// The next token to watch, as text (one token) [default: the clean run's greedy
    /// next token].
    #[arg(long, allow_hyphen_values = true)]
    pub target: Option<String>,
    /// The hook point of each layer: resid_pre, attn_out, mlp_out or resid_post
    /// (blocks.L.hook_<HOOK>).
    #[arg(long, default_value = "resid_pre", value_parser = ["resid_pre", "attn_out", "mlp_out", "resid_post"])]
    pub hook: String,
    /// Print JSON: model, clean, corrupt, target, target_id, hook, tokens, clean_logprob,
    /// corrupt_logprob, logprob [layer][position], restored [layer][position].
    #[arg(long)]
    pub json: bool,
    /// Write a layer × position heatmap of the restored fraction.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

/// `lucent steer`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "The vector is added to the residual stream after block L (blocks.L.hook_resid_post) at every position, times --scale; the steered and the plain continuations are printed. --from \"A|B\" (repeatable) makes the vector: the mean over the pairs of the residual stream after block L at the last position of A minus that of B.\n\nExamples:\n  lucent steer \"You are\" --layer 12 --from \"I love you|I hate you\" --save-vector love.json\n  lucent steer \"I think that you are\" --layer 12 --vector love.json --scale 3 -n 12\n  lucent steer \"My weekend was\" --layer 10 --from \"Wonderful|Terrible\" -n 12 --json"
)]
pub struct SteerArgs {
    /// Model name or path (a decoder).
    #[arg(short, long, default_value = "smollm2")]
    pub model: String,
    /// The text to continue (as is, no chat template).
    pub text: String,
    /// The block after which the vector is added (0 = the first).
    #[arg(long)]
    pub layer: usize,
    /// A JSON file holding the vector: an array of d_model numbers [default: none;
    /// required unless --from].
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "from",
        required_unless_present = "from"
    )]
    pub vector: Option<PathBuf>,
    /// A pair of contrasting prompts "A|B" (repeatable): the vector is the mean of A − B
    /// [default: none; required unless --vector].
    #[arg(long, value_name = "A|B")]
    pub from: Vec<String>,
    /// Multiply the vector by S.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub scale: f32,
    /// New tokens.
    #[arg(short = 'n', long, default_value_t = 24)]
    pub max_tokens: usize,
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Random seed for a temperature above 0.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the vector (as a JSON array) to FILE [default: not written].
    #[arg(long, value_name = "FILE")]
    pub save_vector: Option<PathBuf>,
    /// Print JSON: model, text, layer, scale, norm (of the scaled vector), plain, steered.
    #[arg(long)]
    pub json: bool,
}

/// The id of the one token `text` is (flag names it in errors), or the greedy next
/// token of `plain` when none is given.
fn target_id(model: &Model, text: Option<&str>, flag: &str, plain: &[f32]) -> Result<u32> {
    let Some(text) = text else {
        return Ok(lucent::pipeline::generate::argmax(plain));
    };
    let tm = model.text_model()?;
    let ids = tm.tokenizer.encode_ids(text, false, false)?;
    match ids.as_slice() {
        [id] => Ok(*id),
        _ => Err(Error::Argument(format!(
            "{flag} {text:?} is {} tokens for this model; give one token (e.g. with its leading space, \" Paris\")",
            ids.len()
        ))),
    }
}

/// The text of token `id`.
fn token_text(model: &Model, id: u32) -> Result<String> {
    let tm = model.text_model()?;
    Ok(String::from_utf8_lossy(&tm.tokenizer.token_bytes(id, false)?).into_owned())
}

/// A progress bar of `n` steps on stderr (hidden when stderr is not a terminal).
pub(crate) fn bar(n: usize, what: &str) -> ProgressBar {
    let b = ProgressBar::new(n as u64).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_message(what.to_string());
    b
}

/// `FIRST-LAST` of `--layers`, checked against `n` layers.
pub(crate) fn layer_range(spec: Option<&str>, n: usize) -> Result<std::ops::RangeInclusive<usize>> {
    let Some(spec) = spec else {
        return Ok(0..=n - 1);
    };
    let bad = || {
        Error::Argument(format!(
            "--layers {spec}: give FIRST-LAST within 0-{} (e.g. 20-{})",
            n - 1,
            n - 1
        ))
    };
    let (a, b) = spec.split_once('-').unwrap_or((spec, spec));
    let (a, b): (usize, usize) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a > b || b >= n {
        return Err(bad());
    }
    Ok(a..=b)
}

/// One ablation's result.
#[derive(serde::Serialize)]
struct Ablated {
    heads: Vec<(usize, usize)>,
    interventions: Vec<Intervention>,
    logprob: f64,
    delta: f64,
    top_token: String,
}

/// `lucent ablate`.
pub fn run_ablate(a: AblateArgs) -> Result<()> {
    let model = loader::open(&a.model)?;
    let cfg = model.config().clone();
    let plain = model.intervene(&[])?.next_token_logits(&a.text)?;
    let target = target_id(&model, a.target.as_deref(), "--target", &plain)?;
    let base = lucent::log_prob(&plain, target)?;
    let op = match (&a.intervene, a.mean) {
        (Some(_), _) => "interventions",
        (None, true) => "mean",
        (None, false) => "zero",
    };
    let how = if a.mean {
        HeadAblation::Mean
    } else {
        HeadAblation::Zero
    };
    // One code path for every ablation: the library's (a sweep's cell is the same call).
    let shown = |e: lucent::AblationEffect| -> Result<Ablated> {
        Ok(Ablated {
            top_token: token_text(&model, e.top)?,
            heads: e.heads,
            interventions: e.interventions,
            logprob: e.logprob,
            delta: e.delta,
        })
    };
    let run = |heads: &[(usize, usize)], ivs: Vec<Intervention>| -> Result<Ablated> {
        shown(model.ablation_effect(&a.text, target, base, heads, ivs)?)
    };
    let ablation =
        |heads: &[(usize, usize)]| -> Result<Ablated> { run(heads, how.interventions(heads)) };
    let parse_head = |s: &str| -> Result<(usize, usize)> {
        let bad = || {
            Error::Argument(format!(
                "--heads {s}: write LAYER.HEAD with layer 0-{} and head 0-{} (e.g. 5.1)",
                cfg.decoder_layers.max(1) - 1,
                cfg.n_heads - 1
            ))
        };
        let (l, h) = s.trim().split_once('.').ok_or_else(bad)?;
        let (l, h): (usize, usize) = (l.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?);
        if l >= cfg.decoder_layers || h >= cfg.n_heads {
            return Err(bad());
        }
        Ok((l, h))
    };
    let (results, grid) = if let Some(spec) = &a.intervene {
        if a.png.is_some() || a.mean || a.sweep {
            return Err(Error::Argument(
                "--intervene gives its own interventions; leave out --sweep, --mean and --png"
                    .into(),
            ));
        }
        let text = match spec.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| Error::io(std::path::Path::new(path), e))?,
            None => spec.clone(),
        };
        let ivs = Intervention::parse_json(&text)
            .map_err(|e| Error::Argument(format!("--intervene: {e}")))?;
        (vec![run(&[], ivs)?], None)
    } else if a.heads.is_empty() {
        let layers = layer_range(a.layers.as_deref(), cfg.decoder_layers.max(1))?;
        let n = (layers.end() - layers.start() + 1) * cfg.n_heads;
        let progress = bar(n, "ablating heads");
        let effects = model.head_ablation_sweep(
            &a.text,
            target,
            base,
            layers.clone(),
            how,
            &mut |done, _| progress.set_position(done as u64),
        )?;
        progress.finish_and_clear();
        let results = effects
            .into_iter()
            .map(shown)
            .collect::<Result<Vec<Ablated>>>()?;
        let grid = layers
            .zip(results.chunks(cfg.n_heads))
            .map(|(l, row)| (l, row.iter().map(|r| r.delta as f32).collect()))
            .collect::<Vec<(usize, Vec<f32>)>>();
        (results, Some(grid))
    } else {
        if a.png.is_some() {
            return Err(Error::Argument(
                "--png draws the layer × head heatmap of --sweep; leave out --heads".into(),
            ));
        }
        let heads = a
            .heads
            .iter()
            .map(|s| parse_head(s))
            .collect::<Result<Vec<_>>>()?;
        (vec![ablation(&heads)?], None)
    };
    let target_text = token_text(&model, target)?;
    if let (Some(path), Some(grid)) = (&a.png, &grid) {
        let panel = Panel::new(
            format!("Δ log p({target_text:?}), {op}"),
            grid.iter().map(|(_, r)| r.clone()).collect(),
        )
        .labels(
            grid.iter().map(|(l, _)| l.to_string()).collect(),
            (0..cfg.n_heads).map(|h| h.to_string()).collect(),
        )
        .axes("head", "layer")
        .colormap(ColorMap::Diverging);
        heatmap(&panel, path)?;
    }
    if a.json {
        let out = serde_json::json!({
            "model": model.name(),
            "text": a.text,
            "target": target_text,
            "target_id": target,
            "plain_logprob": base,
            "op": op,
            "results": results,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| Error::Argument(e.to_string()))?
        );
    } else {
        println!(
            "{}: {:?} → {target_text:?} (id {target}), log p = {base:.4} (p = {:.4})",
            model.name(),
            a.text,
            base.exp()
        );
        let mut sorted: Vec<&Ablated> = results.iter().collect();
        sorted.sort_by(|x, y| x.delta.total_cmp(&y.delta));
        let shown = if grid.is_some() {
            10.min(sorted.len())
        } else {
            sorted.len()
        };
        if grid.is_some() {
            println!("the {shown} heads whose {op} ablation lowers log p({target_text:?}) most:");
        }
        println!(
            "{:>12}  {:>9}  {:>9}  top token",
            "ablated", "log p", "Δ log p"
        );
        for r in &sorted[..shown] {
            let heads: Vec<String> = if r.heads.is_empty() {
                r.interventions
                    .iter()
                    .map(|iv| format!("{:?}", iv.op).to_lowercase())
                    .collect()
            } else {
                r.heads.iter().map(|(l, h)| format!("{l}.{h}")).collect()
            };
            println!(
                "{:>12}  {:>9.4}  {:>+9.4}  {:?}",
                heads.join(","),
                r.logprob,
                r.delta,
                r.top_token
            );
        }
        if let Some(path) = &a.png {
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// `lucent patch`: the library's [`Model::patching_sweep`], printed.
pub fn run_patch(a: PatchArgs) -> Result<()> {
    let model = loader::open(&a.model)?;
    let cfg = model.config().clone();
    let target = match &a.target {
        Some(t) => Some(target_id(&model, Some(t), "--target", &[])?),
        None => None,
    };
    let t = model.tokens(&a.clean)?.len();
    let progress = bar(cfg.decoder_layers * t, "patching");
    let sweep = model.patching_sweep(&a.clean, &a.corrupt, target, &a.hook, &mut |done, _| {
        progress.set_position(done as u64)
    })?;
    progress.finish_and_clear();
    let lucent::PatchSweep {
        target,
        tokens,
        clean_logprob: lp_clean,
        corrupt_logprob: lp_corrupt,
        logprob,
        restored,
        ..
    } = sweep;
    let target_text = token_text(&model, target)?;
    if let Some(path) = &a.png {
        let panel = Panel::new(format!("hook_{}: share restored", a.hook), restored.clone())
            .labels(
                (0..cfg.decoder_layers).map(|l| l.to_string()).collect(),
                tokens.clone(),
            )
            .axes("position", "layer")
            .colormap(ColorMap::Diverging);
        heatmap(&panel, path)?;
    }
    if a.json {
        let out = serde_json::json!({
            "model": model.name(),
            "clean": a.clean,
            "corrupt": a.corrupt,
            "target": target_text,
            "target_id": target,
            "hook": format!("blocks.L.hook_{}", a.hook),
            "tokens": tokens,
            "clean_logprob": lp_clean,
            "corrupt_logprob": lp_corrupt,
            "logprob": logprob,
            "restored": restored,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| Error::Argument(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "{}: log p({target_text:?}) clean {lp_clean:.4}, corrupt {lp_corrupt:.4}; share restored by patching blocks.L.hook_{} at one position:",
        model.name(),
        a.hook
    );
    let width = tokens
        .iter()
        .map(|s| format!("{s:?}").chars().count())
        .max()
        .unwrap_or(4)
        .clamp(5, 12);
    print!("{:>5}", "layer");
    for tok in &tokens {
        let shown: String = format!("{tok:?}").chars().take(width).collect();
        print!(" {shown:>width$}");
    }
    println!();
    for (l, row) in restored.iter().enumerate() {
        print!("{l:>5}");
        for r in row {
            print!(" {r:>width$.2}");
        }
        println!();
    }
    if let Some(path) = &a.png {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// `lucent steer`.
pub fn run_steer(a: SteerArgs) -> Result<()> {
    let model = loader::open(&a.model)?;
    let d = model.config().d_model;
    let v = match &a.vector {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
            let v: Vec<f32> = serde_json::from_str(&text).map_err(|e| {
                Error::format(path, format!("--vector: not a JSON array of numbers: {e}"))
            })?;
            v
        }
        None => {
            let pairs = a
                .from
                .iter()
                .map(|p| {
                    p.split_once('|').ok_or_else(|| {
                        Error::Argument(format!("--from {p:?}: write the two prompts as \"A|B\""))
                    })
                })
                .collect::<Result<Vec<(&str, &str)>>>()?;
            model.steering_vector(&pairs, a.layer)?
        }
    };
    if v.len() != d {
        return Err(Error::Argument(format!(
            "--vector has {} numbers but this model's residual stream has {d}",
            v.len()
        )));
    }
    if let Some(path) = &a.save_vector {
        let text = serde_json::to_string(&v).map_err(|e| Error::Argument(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::io(path, e))?;
    }
    let scaled: Vec<f32> = v.iter().map(|x| x * a.scale).collect();
    let norm = scaled.iter().map(|x| x * x).sum::<f32>().sqrt();
    let sampling = Sampling {
        temperature: a.temperature,
        seed: a.seed,
        ..Sampling::greedy()
    }
    .max_tokens(a.max_tokens);
    let hook = format!("blocks.{}.hook_resid_post", a.layer);
    let steered = model
        .intervene(&[Intervention::add(hook.as_str(), scaled)])?
        .generate(&a.text, &sampling)?;
    let plain = model.intervene(&[])?.generate(&a.text, &sampling)?;
    if a.json {
        let out = serde_json::json!({
            "model": model.name(),
            "text": a.text,
            "layer": a.layer,
            "scale": a.scale,
            "norm": norm,
            "plain": plain,
            "steered": steered,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| Error::Argument(e.to_string()))?
        );
    } else {
        println!("plain:   {}{plain}", a.text);
        println!("steered: {}{steered}", a.text);
        println!("(vector added at {hook}, every position; norm {norm:.2})");
        if let Some(path) = &a.save_vector {
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// `lucent attribute`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Direct logit attribution at the last position, as TransformerLens's logit_attrs with the cached scale: the final norm's scale s (1 / RMS of the final residual stream, or 1 / its standard deviation for LayerNorm, which also centres each term) is taken from the run and held fixed, so the target's logit from the final residual, s · (γ ⊙ W_U[target]) · x, splits exactly into the embeddings' term, each head's (its hook_z rows times its slice of W_O, in f32), each FFN's (hook_mlp_out) and the rest: per layer, the attention output as the engine computed it minus the sum of its heads (the quantised product's rounding), the norm's bias, and the f32 rounding of the residual sums. The engine's own logit (quantised head) is printed beside it.\n\nExamples:\n  lucent attribute \"The Eiffel Tower is in\" --target \" Paris\"\n  lucent attribute \"The capital of France is\" --png dla.png --json"
)]
pub struct AttributeArgs {
    /// Model name or path (a decoder).
    #[arg(short, long, default_value = "smollm2")]
    pub model: String,
    /// The text whose next token is attributed (the prompt as is, no chat template).
    pub text: String,
    /// The next token, as text (one token, e.g. " Paris") [default: the model's greedy
    /// next token].
    #[arg(long, allow_hyphen_values = true)]
    pub target: Option<String>,
    /// Print JSON: model, text, target, target_id, logit (the engine's), logit_f32 (from
    /// the final residual in f32), scale, embed, heads [layer][head], mlp [layer],
    /// attn_rest [layer], rest, sum (every term added).
    #[arg(long)]
    pub json: bool,
    /// Write a heatmap: layers × (heads, then the FFN as the last column).
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

/// `lucent attribute`.
pub fn run_attribute(a: AttributeArgs) -> Result<()> {
    let model = loader::open(&a.model)?;
    let plain = model.intervene(&[])?.next_token_logits(&a.text)?;
    let target = target_id(&model, a.target.as_deref(), "--target", &plain)?;
    let target_text = token_text(&model, target)?;
    let r = model.logit_attribution(&a.text, target)?;
    if let Some(path) = &a.png {
        let layers = r.heads.len();
        let n_heads = r.heads.first().map_or(0, Vec::len);
        let matrix: Vec<Vec<f32>> = (0..layers)
            .map(|l| {
                let mut row: Vec<f32> = r.heads[l].iter().map(|&x| x as f32).collect();
                row.push(r.mlp[l] as f32);
                row
            })
            .collect();
        let mut cols: Vec<String> = (0..n_heads).map(|h| h.to_string()).collect();
        cols.push("FFN".into());
        let panel = Panel::new(
            format!("direct logit attribution to {target_text:?}"),
            matrix,
        )
        .labels((0..layers).map(|l| l.to_string()).collect(), cols)
        .axes("head (FFN last)", "layer")
        .colormap(ColorMap::Diverging);
        heatmap(&panel, path)?;
    }
    if a.json {
        let mut out = serde_json::to_value(&r).map_err(|e| Error::Argument(e.to_string()))?;
        out["model"] = model.name().into();
        out["text"] = a.text.clone().into();
        out["target"] = target_text.into();
        out["target_id"] = target.into();
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| Error::Argument(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "logit of {target_text:?}: {:.4} (engine), {:.4} from the final residual in f32; scale {:.4}",
        r.logit, r.logit_f32, r.scale
    );
    let mut terms: Vec<(String, f64)> = vec![("embeddings".into(), r.embed)];
    for (l, row) in r.heads.iter().enumerate() {
        for (h, &v) in row.iter().enumerate() {
            terms.push((format!("head {l}.{h}"), v));
        }
        terms.push((format!("FFN {l}"), r.mlp[l]));
    }
    terms.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
    println!("largest terms:");
    for (name, v) in terms.iter().take(15) {
        println!("  {name:<12} {v:+.4}");
    }
    println!(
        "rest: attention rounding {:+.4}, residual rounding {:+.4}; all terms {:.4}",
        r.attn_rest.iter().sum::<f64>(),
        r.rest,
        r.sum
    );
    if let Some(path) = &a.png {
        println!("wrote {}", path.display());
    }
    Ok(())
}
