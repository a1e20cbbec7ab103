//! `lucent attention --demo`: the guides' single-head example, step by step.
//!
//! Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + mask) · V
//!
//! The inputs are the seed-42 Q, K, V of the guides (numpy `np.random.seed(42)`, then
//! `randn(3, 4)` three times), copied from tests/data/seed_examples.json
//! (`attention_seed42`); every printed value matches that file's true values.

use std::path::PathBuf;

use lucent::nn::mask::causal_mask;
use lucent::ops::{attention, matmul_t, AttentionParams};
use lucent::viz::{heatmap_grid, ColorMap, Panel};
use lucent::{Error, Result, Tensor};

use crate::commands::numbers::at_least;
use crate::show::{json_matrix, print_matrix};

/// Q of the seed-42 example (tests/data/seed_examples.json, `attention_seed42.Q`).
const Q: [[f64; 4]; 3] = [
    [
        0.4967141530112327,
        -0.13826430117118466,
        0.6476885381006925,
        1.5230298564080254,
    ],
    [
        -0.23415337472333597,
        -0.23413695694918055,
        1.5792128155073915,
        0.7674347291529088,
    ],
    [
        -0.4694743859349521,
        0.5425600435859647,
        -0.46341769281246226,
        -0.46572975357025687,
    ],
];
/// K of the seed-42 example (`attention_seed42.K`).
const K: [[f64; 4]; 3] = [
    [
        0.24196227156603412,
        -1.913280244657798,
        -1.7249178325130328,
        -0.5622875292409727,
    ],
    [
        -1.0128311203344238,
        0.3142473325952739,
        -0.9080240755212109,
        -1.4123037013352915,
    ],
    [
        1.465648768921554,
        -0.22577630048653566,
        0.06752820468792384,
        -1.4247481862134568,
    ],
];
/// V of the seed-42 example (`attention_seed42.V`).
const V: [[f64; 4]; 3] = [
    [
        -0.5443827245251827,
        0.11092258970986608,
        -1.1509935774223028,
        0.37569801834567196,
    ],
    [
        -0.600638689918805,
        -0.2916937497932768,
        -0.6017066122293969,
        1.8522781845089378,
    ],
    [
        -0.013497224737933921,
        -1.0577109289559004,
        0.822544912103189,
        -1.2208436499710222,
    ],
];

/// Arguments of `lucent attention`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(after_help = "\
Examples:
  lucent attention --demo                 the guides' seed-42 example, step by step
  lucent attention --demo --causal        the same with a causal (look-ahead) mask
  lucent attention --demo --png attn.png  also draw the scores and weights
  lucent attention --demo --json          every intermediate as JSON
  lucent attention -m smollm2 \"The cat sat on the mat\" --head 2 --token cat --steps
                                          one head's arithmetic for one query of a decoder
  lucent attention -m whisper-tiny.en examples/speech.wav --png cross.png
                                          Whisper's cross-attention over the audio
  lucent attention -m whisper-tiny.en examples/speech.wav --stack encoder --layer 3 --png enc.png
                                          one layer's heads of Whisper's encoder self-attention

With -m, every model kind (encoder, decoder, encoder-decoder) shows one layer's heads the
same way: --layer (default: the last), --head (default: all), --token (one query's row),
--steps (one head's arithmetic for that query). An encoder-decoder given none of --layer,
--stack, --head, --token and --steps shows every layer's cross-attention, the mean over
its heads.

--json prints one shape for every kind:
  {\"model\", \"kind\", \"stack\", \"layer\" (null: the mean view), \"input\",
   \"tokens\" (query labels), \"keys\" (key labels), \"rows\" (the query positions shown),
   \"n_heads\", \"n_kv_heads\",
   \"heads\": [{\"layer\", \"head\" (null: mean of the heads), \"kv_head\", \"weights\": [[...]]}],
   \"steps\" (with --steps), \"png\", \"png_notes\" (with --png), and the kind's own fields}
(docs/attention.md).

Pictures are at most 4000 pixels a side: a long axis (Whisper's 1500 audio frames) is
downsampled, each cell the mean of k neighbouring frames, and the picture says so under
each panel's title (e.g. \"frames: 1500 → 750, mean of 2\"); the JSON keeps every value.

The demo's Q, K, V are numpy's seed-42 draws; the printed values are the true ones
(tests/data/seed_examples.json). The guides print different scores and weights for these
inputs: theirs do not follow from them.")]
pub struct Args {
    /// Run the guides' single-head example (seed-42 Q, K, V of 3 tokens × 4 features).
    #[arg(long)]
    demo: bool,
    /// With `-m`: the text (a speech model: the WAV file) whose attention to show.
    text: Option<String>,
    /// A real model: a name (see `lucent models`), a Hugging Face folder, a .gguf file or a
    /// training run [default: minilm when a TEXT is given].
    #[arg(long, short = 'm')]
    model: Option<String>,
    /// With `-m`: the layer to show, from 0 (default: the last; an encoder-decoder with
    /// none of --layer, --stack, --head, --token, --steps: the mean cross-attention of
    /// every layer).
    #[arg(long, value_parser = at_least::<0, usize>)]
    layer: Option<usize>,
    /// With an encoder-decoder (Whisper, a `train seq2seq` run): which attention,
    /// `cross` (target tokens over the encoder's output), `encoder` or `decoder`
    /// (self-attention) [default: cross].
    #[arg(long, value_name = "cross|encoder|decoder")]
    stack: Option<String>,
    /// With `-m`: the head to show, from 0 (default: all heads; `--steps` takes head 0).
    #[arg(long, value_parser = at_least::<0, usize>)]
    head: Option<usize>,
    /// With `-m`: the query whose row to show, as a token (`it`) or a position
    /// [default: every row].
    #[arg(long)]
    token: Option<String>,
    /// With `-m`: recompute one head step by step (scores, scale, mask, softmax, output)
    /// for the --token query (default: an encoder's first token, a decoder's last).
    #[arg(long)]
    steps: bool,
    /// Apply a causal mask: token i may only attend to tokens 0..=i.
    #[arg(long)]
    causal: bool,
    /// Also draw the scaled scores and the weights as heatmaps (.png or .svg); at most
    /// 4000 pixels a side.
    #[arg(long, value_name = "FILE")]
    png: Option<PathBuf>,
    /// Print JSON instead of the step-by-step walk-through.
    #[arg(long)]
    json: bool,
}

fn tensor(m: &[[f64; 4]; 3]) -> Result<Tensor> {
    let data: Vec<f32> = m.iter().flatten().map(|&v| v as f32).collect();
    Tensor::new(data, &[1, 1, 3, 4]) // (b, h, t, d_k) = (1, 1, 3, 4)
}

/// (1, 1, r, c) → rows.
fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    let c = t.last_dim();
    t.data().chunks(c).map(<[f32]>::to_vec).collect()
}

/// Run `lucent attention`.
pub fn run(args: Args) -> Result<()> {
    if !args.demo {
        return run_real_model(args);
    }
    if args.model.is_some() || args.text.is_some() {
        return Err(Error::Argument(
            "--demo runs the guides' fixed example; drop it to show a model's attention (-m MODEL TEXT)".into(),
        ));
    }
    let (q, k, v) = (tensor(&Q)?, tensor(&K)?, tensor(&V)?);
    let d_k = 4usize;
    let scores = matmul_t(&q, &k)?; // (1, 1, 3, 3)
    let scale = 1.0 / (d_k as f32).sqrt();
    let scaled = scores.scale(scale); // (1, 1, 3, 3)
    let mask = if args.causal {
        Some(causal_mask(3)?)
    } else {
        None
    };
    let bias = mask.as_ref().map(|m| m.to_bias()).transpose()?; // (3, 3): 0 / −∞
    let masked = match &bias {
        Some(b) => Some(scaled.add(b)?),
        None => None,
    };
    let mut p = AttentionParams::new(d_k);
    p.bias = bias.as_ref();
    p.want_weights = true;
    let out = attention(&q, &k, &v, &p)?;
    let weights = out
        .weights
        .ok_or_else(|| Error::Argument("attention returned no weights".into()))?;
    let w = rows(&weights);
    let sums: Vec<f32> = w.iter().map(|r| r.iter().sum()).collect();
    let most: Vec<usize> = weights.argmax_rows();

    let pos: Vec<String> = (0..3).map(|i| format!("token {i}")).collect();
    let feat: Vec<String> = (0..4).map(|i| format!("d{i}")).collect();
    let keys: Vec<String> = (0..3).map(|i| format!("key {i}")).collect();

    if let Some(path) = &args.png {
        let score_panel = Panel::new(
            if args.causal {
                "scaled scores + causal mask"
            } else {
                "scaled scores Q·Kᵀ/√d_k"
            },
            rows(masked.as_ref().unwrap_or(&scaled)),
        )
        .labels(pos.clone(), keys.clone())
        .axes("key", "query")
        .colormap(ColorMap::Viridis)
        .annotate(true);
        let weight_panel = Panel::new("softmax weights", w.clone())
            .labels(pos.clone(), keys.clone())
            .axes("key", "query")
            .range(0.0, 1.0)
            .annotate(true);
        heatmap_grid(&[score_panel, weight_panel], path)?;
    }

    if args.json {
        let mut j = serde_json::json!({
            "source": "seed_examples.json attention_seed42 (numpy seed 42)",
            "d_k": d_k,
            "causal": args.causal,
            "Q": json_matrix(&rows(&q)),
            "K": json_matrix(&rows(&k)),
            "V": json_matrix(&rows(&v)),
            "scores": json_matrix(&rows(&scores)),
            "scaled": json_matrix(&rows(&scaled)),
            "weights": json_matrix(&w),
            "row_sums": sums,
            "output": json_matrix(&rows(&out.output)),
            "attends_most_to": most,
        });
        if let (Some(m), Some(ms)) = (&mask, &masked) {
            j["mask"] = serde_json::json!(m.matrix(0));
            j["masked"] = json_matrix(&rows(ms));
        }
        if let Some(path) = &args.png {
            j["png"] = serde_json::json!(path.display().to_string());
        }
        println!("{j:#}");
        return Ok(());
    }

    println!("Scaled dot-product attention, one head, 3 tokens, d_k = {d_k}");
    println!(
        "Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k{}) · V\n",
        if args.causal { " + mask" } else { "" }
    );
    println!("Inputs: numpy seed 42, randn(3, 4) for Q, then K, then V.\n");
    print_matrix(
        "Q (queries: what each token is looking for)",
        &rows(&q),
        &pos,
        &feat,
        4,
    );
    print_matrix(
        "K (keys: what each token offers to be found by)",
        &rows(&k),
        &pos,
        &feat,
        4,
    );
    print_matrix(
        "V (values: what each token hands over)",
        &rows(&v),
        &pos,
        &feat,
        4,
    );
    print_matrix(
        "Step 1. scores = Q·Kᵀ (row i: how well query i matches each key)",
        &rows(&scores),
        &pos,
        &keys,
        4,
    );
    print_matrix(
        &format!(
            "Step 2. scaled = scores / √d_k = scores / {}",
            (d_k as f32).sqrt()
        ),
        &rows(&scaled),
        &pos,
        &keys,
        4,
    );
    let mut step = 3;
    if let (Some(m), Some(ms)) = (&mask, &masked) {
        println!(
            "Step {step}. causal mask (✓ = may attend, · = hidden: a token cannot see the future)"
        );
        for (i, r) in m.matrix(0).iter().enumerate() {
            let cells: Vec<&str> = r.iter().map(|&b| if b { "✓" } else { "·" }).collect();
            println!("  {:<8}  {}", pos[i], cells.join("  "));
        }
        println!();
        print_matrix(
            "        scaled + mask (0 where ✓, −∞ where ·)",
            &rows(ms),
            &pos,
            &keys,
            4,
        );
        step += 1;
    }
    println!("Step {step}. weights = softmax over each row (e^x / Σ e^x): each row sums to 1");
    let mut wcols = keys.clone();
    wcols.push("row sum".into());
    let wrows: Vec<Vec<f32>> = w
        .iter()
        .zip(&sums)
        .map(|(r, s)| r.iter().copied().chain([*s]).collect())
        .collect();
    print_matrix("", &wrows, &pos, &wcols, 4);
    step += 1;
    print_matrix(
        &format!(
            "Step {step}. output = weights · V (each row a weighted average of the value rows)"
        ),
        &rows(&out.output),
        &pos,
        &feat,
        4,
    );
    println!("Where each token looks:");
    for (i, &j) in most.iter().enumerate() {
        println!(
            "  token {i} attends most to token {j} (weight {:.4})",
            w[i][j]
        );
    }
    if args.causal {
        println!("\nQ, K, V and the unmasked scores are the seed-42 example's (tests/data/seed_examples.json);");
        println!(
            "the mask changes rows 0 and 1 only: the last token could already see everything."
        );
    } else {
        println!(
            "\nThese are the true values for the seed-42 inputs (tests/data/seed_examples.json);"
        );
        println!(
            "the guides print different scores and weights, which do not follow from these inputs."
        );
    }
    if let Some(path) = &args.png {
        println!("\nWrote {}", path.display());
    }
    Ok(())
}

/// `lucent attention -m MODEL TEXT`: a real model's attention weights, per layer and head.
fn run_real_model(args: Args) -> Result<()> {
    let Some(text) = args.text else {
        return Err(Error::Argument(
            "give --demo for the guides' example, or a text (and optionally -m MODEL) for a real model's attention, \
             e.g. lucent attention -m minilm \"The cat sat on the mat because it was tired\""
                .into(),
        ));
    };
    if args.causal {
        return Err(Error::Argument(
            "--causal belongs to --demo; a real model uses its own mask (causal for decoders)"
                .into(),
        ));
    }
    let spec = args.model.unwrap_or_else(|| "minilm".into());
    let model = crate::loader::open(&spec)?;
    match model.kind() {
        lucent::ModelKind::EncoderDecoder => {
            let out = args
                .png
                .unwrap_or_else(|| PathBuf::from("cross_attention.png"));
            super::attention_seq2seq::run_attention(
                &model,
                super::attention_seq2seq::AttentionArgs {
                    input: text,
                    out,
                    json: args.json,
                    stack: args.stack,
                    layer: args.layer,
                    head: args.head,
                    token: args.token,
                    steps: args.steps,
                },
            )
        }
        kind => {
            if let Some(s) = &args.stack {
                return Err(Error::Argument(format!(
                    "--stack {s} belongs to encoder-decoders (Whisper, a `train seq2seq` run); {} has one stack",
                    model.name()
                )));
            }
            if kind == lucent::ModelKind::Decoder {
                super::attention_decoder::run_decoder(
                    &model,
                    super::attention_decoder::DecoderArgs {
                        prompt: text,
                        layer: args.layer,
                        head: args.head,
                        token: args.token,
                        steps: args.steps,
                        png: args.png,
                        json: args.json,
                    },
                )
            } else {
                super::attention_model::run_model(
                    &model,
                    super::attention_model::ModelAttentionArgs {
                        text,
                        layer: args.layer,
                        head: args.head,
                        token: args.token,
                        steps: args.steps,
                        png: args.png,
                        json: args.json,
                    },
                )
            }
        }
    }
}
