//! `lucent memory --preset gpt2 --seq 2048`: bytes for the weights, the KV cache and the
//! attention score matrices at a batch size and sequence length.
//!
//! KV cache = 2 · layers · b · h_kv · T · d_k · bytes; one head's scores = T² · bytes,
//! one layer's b · h · T² · bytes. The scores grow as O(T²): doubling T quadruples them.

use lucent::model::memory::{human_bytes, thousands, MemoryEstimate};
use lucent::model::ModelKind;
use lucent::{Dtype, Result};

use crate::commands::numbers::at_least;
use crate::config_args::{describe, ConfigArgs};

/// Element type for the estimate.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DtypeArg {
    /// 4 bytes.
    F32,
    /// 2 bytes.
    F16,
    /// 2 bytes.
    Bf16,
}

impl From<DtypeArg> for Dtype {
    fn from(d: DtypeArg) -> Dtype {
        match d {
            DtypeArg::F32 => Dtype::F32,
            DtypeArg::F16 => Dtype::F16,
            DtypeArg::Bf16 => Dtype::BF16,
        }
    }
}

/// Arguments of `lucent memory`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(
    after_help = "Examples:\n  lucent memory --preset gpt2 --seq 2048\n  lucent memory --preset smollm2 --seq 8192 --batch 4 --dtype bf16"
)]
pub struct Args {
    #[command(flatten)]
    config: ConfigArgs,
    /// Sequence length T (tokens per sequence).
    #[arg(long, short = 't', value_name = "T", value_parser = at_least::<0, usize>)]
    seq: usize,
    /// Batch size b.
    #[arg(long, short = 'b', default_value_t = 1, value_parser = at_least::<0, usize>)]
    batch: usize,
    /// Element type of weights, cache and scores.
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DtypeArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// The lengths of the O(T²) table: 512 … 4096 and the asked one.
fn growth_lengths(seq: usize) -> Vec<usize> {
    let mut ts = vec![512, 1024, 2048, 4096, seq];
    ts.sort_unstable();
    ts.dedup();
    ts
}

/// Run `lucent memory`.
pub fn run(args: Args) -> Result<()> {
    let (label, cfg) = args.config.config()?;
    let dtype: Dtype = args.dtype.into();
    let m = MemoryEstimate::of(&cfg, args.batch, args.seq, dtype)?;
    let growth = growth_lengths(args.seq)
        .into_iter()
        .map(|t| MemoryEstimate::of(&cfg, args.batch, t, dtype))
        .collect::<Result<Vec<_>>>()?;
    if args.json {
        let v = serde_json::json!({
            "model": label,
            "estimate": m,
            "growth": growth,
        });
        println!("{v:#}");
        return Ok(());
    }
    let s = m.bytes_per_element;
    let (b, t) = (args.batch, args.seq);
    let (h, hkv, dk) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    println!("Memory of {label}: {}", describe(&cfg));
    println!(
        "batch b = {b}, sequence T = {t}, {} ({s} bytes per element)\n",
        m.dtype
    );
    let line = |name: &str, formula: String, bytes: u64| {
        println!(
            "{name:<22}{formula:<52}{:>20} B  {:>11}",
            thousands(bytes),
            human_bytes(bytes)
        );
    };
    line(
        "weights",
        format!("{} params × {s} B", thousands(m.parameters)),
        m.weights,
    );
    let dec = match cfg.kind {
        ModelKind::Encoder => 0,
        _ => cfg.decoder_layers,
    };
    if dec == 0 {
        println!(
            "{:<22}none: an encoder reads the whole input at once and does not decode",
            "KV cache"
        );
    } else {
        line(
            "KV cache",
            format!("2 · {dec} layers · {b} · {hkv} · {t} · {dk} · {s} B"),
            m.kv_cache,
        );
        if m.kv_cache_windowed != m.kv_cache {
            let w = cfg.sliding_window.unwrap_or(0);
            line(
                "  with windows",
                format!("local layers keep min(T, {w}) positions"),
                m.kv_cache_windowed,
            );
        }
        if m.cross_kv > 0 {
            line(
                "cross-attention K, V",
                format!("2 · {dec} layers · {b} · {hkv} · T_src {t} · {dk} · {s} B"),
                m.cross_kv,
            );
        }
    }
    println!("attention scores");
    line(
        "  one head",
        format!("T² · {s} B = {t}² · {s}"),
        m.scores_per_head,
    );
    line(
        "  one layer",
        format!("b · h · T² · {s} B = {b} · {h} · {t}² · {s}"),
        m.scores_per_layer,
    );
    line(
        &format!("  all {} at once", m.attention_layers),
        format!("{} attention sub-layers · one layer", m.attention_layers),
        m.scores_all_layers,
    );
    let per_head_2048 = 2048u64 * 2048 * s;
    println!(
        "\nNote: the guides say \"2048 tokens, ~6 MB per head\"; the true figure is 2048² × {s} B = {} B = {} per head in {}.",
        thousands(per_head_2048),
        human_bytes(per_head_2048),
        m.dtype
    );
    println!("\nScores grow as O(T²) (double T, four times the bytes); the KV cache as O(T):");
    println!(
        "{:>8}{:>14}{:>14}{:>16}{:>14}",
        "T", "one head", "one layer", "all layers", "KV cache"
    );
    for g in &growth {
        println!(
            "{:>8}{:>14}{:>14}{:>16}{:>14}",
            g.seq,
            human_bytes(g.scores_per_head),
            human_bytes(g.scores_per_layer),
            human_bytes(g.scores_all_layers),
            human_bytes(g.kv_cache_windowed),
        );
    }
    Ok(())
}
