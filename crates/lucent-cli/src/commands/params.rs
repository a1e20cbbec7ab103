//! `lucent params --preset gpt2` or `lucent params --d-model 768 --heads 12 --d-ff 3072`:
//! exact parameter counts, component by component.
//!
//! Every number is computed from the `ModelConfig` (lucent::model::params): token
//! embeddings V·d, attention d·(h·d_k) per projection, FFN d·d_ff + d_ff + d_ff·d + d,
//! LayerNorm 2d, ... times the number of layers. Also prints the guide's Problem 1 lines
//! (one Q head, the four attention matrices, the FFN, the norms of one layer).

use lucent::model::memory::thousands;
use lucent::model::params::{AttentionCount, ParamCount, StackCount};
use lucent::model::presets::PRESETS;
use lucent::model::{ModelConfig, ModelKind, PositionKind};
use lucent::Result;

use crate::config_args::{describe, ConfigArgs};

/// Arguments of `lucent params`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent params --preset bert-base\n  lucent params --d-model 768 --heads 12 --d-ff 3072\n  lucent params --preset smollm2 --layers 12 --json\n  lucent params --list"
)]
pub struct Args {
    #[command(flatten)]
    config: ConfigArgs,
    /// List the presets and exit.
    #[arg(long)]
    list: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Run `lucent params`.
pub fn run(args: Args) -> Result<()> {
    if args.list {
        for p in PRESETS {
            println!("{:<18} {}", p.name, p.description);
        }
        return Ok(());
    }
    let (label, cfg) = args.config.config()?;
    let count = ParamCount::of(&cfg)?;
    let guide = count.guide_figures(&cfg);
    if args.json {
        let stacks: Vec<_> = count
            .stacks
            .iter()
            .map(|s| {
                serde_json::json!({
                    "stack": s.stack,
                    "layers": s.layers,
                    "per_layer": s.layer,
                    "per_layer_total": s.layer.total(),
                    "all_layers": s.all_layers(),
                    "final_norm": s.final_norm,
                    "total": s.total(),
                })
            })
            .collect();
        let v = serde_json::json!({
            "model": label,
            "config": cfg,
            "token_embeddings": count.token_embeddings,
            "position_embeddings": count.position_embeddings,
            "token_type_embeddings": count.token_type_embeddings,
            "embedding_norm": count.embedding_norm,
            "embeddings": count.embeddings(),
            "stacks": stacks,
            "pooler": count.pooler,
            "head": count.head,
            "head_tied": count.head_tied,
            "total": count.total(),
            "guide_problem_1": guide,
        });
        println!("{v:#}");
        return Ok(());
    }

    let (d, v) = (cfg.d_model, cfg.vocab_size);
    println!("Parameters of {label}: {}\n", describe(&cfg));
    println!("{:<52}{:>16}{:>18}", "component", "one layer", "total");
    println!("{}", "─".repeat(86));
    println!("embeddings");
    row(
        &format!("  token embeddings (V·d = {v}·{d})"),
        None,
        count.token_embeddings,
    );
    match cfg.position {
        PositionKind::Learned => row(
            &format!(
                "  position embeddings (max_len·d = {}·{d})",
                cfg.max_positions
            ),
            None,
            count.position_embeddings,
        ),
        PositionKind::Sinusoidal => row("  position encoding (sinusoidal: fixed)", None, 0),
        PositionKind::Rope { .. } => row("  positions (RoPE: no parameters)", None, 0),
        PositionKind::Alibi => row("  positions (ALiBi: no parameters)", None, 0),
        PositionKind::None => {}
    }
    if count.token_type_embeddings > 0 {
        row(
            &format!("  token-type embeddings ({}·{d})", cfg.type_vocab_size),
            None,
            count.token_type_embeddings,
        );
    }
    if count.embedding_norm > 0 {
        row("  embedding norm", None, count.embedding_norm);
    }
    for s in &count.stacks {
        print_stack(&cfg, s);
    }
    if cfg.pooler {
        row(
            &format!("pooler (d·d + d = {d}·{d} + {d})"),
            None,
            count.pooler,
        );
    }
    match (cfg.kind, count.head_tied) {
        (ModelKind::Encoder, _) => row("head (none: an encoder outputs hidden states)", None, 0),
        (_, true) => row("head (tied to the token embeddings)", None, 0),
        (_, false) => row(&format!("head (V·d = {v}·{d})"), None, count.head),
    }
    println!("{}", "─".repeat(86));
    row("total", None, count.total());
    println!(
        "  = {} (embeddings {:.1}%)",
        approx(count.total()),
        100.0 * count.embeddings() as f64 / count.total().max(1) as f64
    );

    let dk = cfg.head_dim;
    println!("\nThe guide's Problem 1, for this config:");
    let lines = [
        (
            format!("Q projection of one head (d·d_k = {d}·{dk}, no bias)"),
            guide.q_projection_one_head,
        ),
        (
            "attention, W_Q W_K W_V W_O without biases".to_string(),
            guide.attention_four_matrices_no_bias,
        ),
        (
            format!(
                "FFN of one layer, {}",
                if cfg.ffn_bias {
                    "with biases"
                } else {
                    "no biases"
                }
            ),
            guide.ffn,
        ),
        ("norms of one layer".to_string(), guide.norms_per_layer),
    ];
    for (name, n) in lines {
        println!("  {name:<58}{:>16}", thousands(n));
    }
    Ok(())
}

fn print_stack(cfg: &ModelConfig, s: &StackCount) {
    let n = s.layers as u64;
    println!("{} layer (× {})", s.stack.name(), s.layers);
    let l = &s.layer;
    print_attention("self-attention", cfg, &l.self_attention, n);
    if let Some(c) = &l.cross_attention {
        print_attention("cross-attention", cfg, c, n);
    }
    let (d, f) = (cfg.d_model, cfg.d_ff);
    let ffn = &l.ffn;
    if ffn.gate_weight > 0 {
        row(
            &format!("  FFN W_gate (d·d_ff = {d}·{f})"),
            Some(n),
            ffn.gate_weight,
        );
        opt_row("  FFN b_gate", n, ffn.gate_bias);
        row(
            &format!("  FFN W_up (d·d_ff = {d}·{f})"),
            Some(n),
            ffn.up_weight,
        );
        opt_row("  FFN b_up", n, ffn.up_bias);
        row(
            &format!("  FFN W_down (d_ff·d = {f}·{d})"),
            Some(n),
            ffn.down_weight,
        );
        opt_row("  FFN b_down", n, ffn.down_bias);
    } else {
        row(
            &format!("  FFN W₁ (d·d_ff = {d}·{f})"),
            Some(n),
            ffn.up_weight,
        );
        opt_row("  FFN b₁ (d_ff)", n, ffn.up_bias);
        row(
            &format!("  FFN W₂ (d_ff·d = {f}·{d})"),
            Some(n),
            ffn.down_weight,
        );
        opt_row("  FFN b₂ (d)", n, ffn.down_bias);
    }
    let norm = match cfg.norm {
        lucent::model::NormKind::LayerNorm if cfg.norm_bias => "LayerNorm γ, β",
        lucent::model::NormKind::LayerNorm => "LayerNorm γ",
        lucent::model::NormKind::RmsNorm => "RMSNorm γ",
    };
    row(
        &format!(
            "  norms ({} × {norm} = {} × {})",
            l.norm_count,
            l.norm_count,
            thousands(l.norm_size)
        ),
        Some(n),
        l.norms(),
    );
    row("  one layer", Some(n), l.total());
    if s.final_norm > 0 {
        row(
            &format!("  final {} norm", s.stack.name()),
            None,
            s.final_norm,
        );
    }
}

fn print_attention(what: &str, cfg: &ModelConfig, a: &AttentionCount, n: u64) {
    let (d, q, kv) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim());
    row(
        &format!("  {what} W_Q (d·h·d_k = {d}·{q})"),
        Some(n),
        a.q_weight,
    );
    opt_row(&format!("  {what} b_Q"), n, a.q_bias);
    row(
        &format!("  {what} W_K (d·h_kv·d_k = {d}·{kv})"),
        Some(n),
        a.k_weight,
    );
    opt_row(&format!("  {what} b_K"), n, a.k_bias);
    row(
        &format!("  {what} W_V (d·h_kv·d_k = {d}·{kv})"),
        Some(n),
        a.v_weight,
    );
    opt_row(&format!("  {what} b_V"), n, a.v_bias);
    row(
        &format!("  {what} W_O (h·d_k·d = {q}·{d})"),
        Some(n),
        a.o_weight,
    );
    opt_row(&format!("  {what} b_O"), n, a.o_bias);
    opt_row(&format!("  {what} QK-norm (2·d_k)"), n, a.qk_norm);
}

/// A row: name, the per-layer count (with its × N total) or a one-off count.
fn row(name: &str, layers: Option<u64>, count: u64) {
    match layers {
        Some(n) => println!(
            "{name:<52}{:>16}{:>18}",
            thousands(count),
            thousands(count.saturating_mul(n))
        ),
        None => println!("{name:<52}{:>16}{:>18}", "", thousands(count)),
    }
}

/// A per-layer row printed only when the component exists.
fn opt_row(name: &str, layers: u64, count: u64) {
    if count > 0 {
        row(name, Some(layers), count);
    }
}

/// 124439808 → "124.4M", 6738415616 → "6.74B".
fn approx(n: u64) -> String {
    let x = n as f64;
    if x >= 1e9 {
        format!("{:.2}B", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}K", x / 1e3)
    } else {
        n.to_string()
    }
}
