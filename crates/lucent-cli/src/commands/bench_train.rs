//! `lucent bench train` : training
//! throughput in tokens per second of a fixed tiny GPT, at 1 and 2 threads.
//!
//! The configuration is the PyTorch reference: 4 layers, d 128, 4 heads,
//! d_ff 512, block 64, batch 12, a character vocabulary of 80, AdamW; one step = forward,
//! cross-entropy, backward, clipping and the AdamW update on random token windows.
//! `scripts/bench-train-peer.sh` runs the same model in PyTorch for the ratio.

use std::time::Instant;

use crate::commands::numbers::at_least;
use crate::show::count;
use lucent::model::DecoderModel;
use lucent::train::models::{new_gpt, Dims};
use lucent::train::optim::{clip_grad_norm, AdamW, DecayRule};
use lucent::train::Parameters;
use lucent::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Arguments of `lucent bench train`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
pub struct Args {
    // `--thread-counts`, this flag's name before it was spelled as the other benches
    // spell it, still works (a hidden alias) so that old commands keep running.
    /// Thread counts to measure, comma-separated.
    #[arg(
        long = "threads-list",
        alias = "thread-counts",
        value_delimiter = ',',
        default_value = "1,2",
        value_parser = at_least::<1, usize>
    )]
    threads_list: Vec<usize>,
    /// Timed steps per thread count (after 3 warm-up steps).
    #[arg(long, default_value_t = 20, value_parser = at_least::<1, usize>)]
    steps: usize,
    /// Layers.
    #[arg(long, default_value_t = 4, value_parser = at_least::<1, usize>)]
    layers: usize,
    /// Model width.
    #[arg(long = "d-model", default_value_t = 128, value_parser = at_least::<1, usize>)]
    d_model: usize,
    /// Heads.
    #[arg(long, default_value_t = 4, value_parser = at_least::<1, usize>)]
    heads: usize,
    /// Context length.
    #[arg(long, default_value_t = 64, value_parser = at_least::<1, usize>)]
    block: usize,
    /// Batch size.
    #[arg(long, default_value_t = 12, value_parser = at_least::<1, usize>)]
    batch: usize,
    /// Vocabulary size.
    #[arg(long, default_value_t = 80, value_parser = at_least::<1, usize>)]
    vocab: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn measure(a: &Args, threads: usize) -> Result<(f64, usize)> {
    let dims = Dims {
        layers: a.layers,
        d_model: a.d_model,
        heads: a.heads,
        d_ff: 4 * a.d_model,
        block: a.block,
        vocab: a.vocab,
    };
    let mut rng = StdRng::seed_from_u64(0);
    let mut model = new_gpt(&dims, &mut rng)?;
    model.requires_grad();
    let params = model.num_parameters();
    let mut opt = AdamW::new(1e-3, (0.9, 0.99), 1e-8, 0.1, DecayRule::MatricesOnly);
    let pool = lucent::Runtime::builder().threads(threads).build()?;
    let mut step = |model: &mut DecoderModel, rng: &mut StdRng| -> Result<()> {
        let window = |rng: &mut StdRng| {
            (0..=a.block)
                .map(|_| rng.random_range(0..a.vocab))
                .collect::<Vec<_>>()
        };
        let rows: Vec<Vec<usize>> = (0..a.batch).map(|_| window(rng)).collect();
        let x: Vec<Vec<usize>> = rows.iter().map(|r| r[..a.block].to_vec()).collect();
        let y: Vec<Vec<usize>> = rows.iter().map(|r| r[1..].to_vec()).collect();
        lucent::train::lm_backward(model, &x, &y, None)?;
        clip_grad_norm(model, 1.0);
        opt.step(model)?;
        model.zero_grad();
        Ok(())
    };
    pool.install(|| {
        for _ in 0..3 {
            step(&mut model, &mut rng)?;
        }
        let t0 = Instant::now();
        for _ in 0..a.steps {
            step(&mut model, &mut rng)?;
        }
        let secs = t0.elapsed().as_secs_f64();
        Ok(((a.steps * a.batch * a.block) as f64 / secs, params))
    })
}

/// Run `lucent bench train`.
pub fn run(args: Args) -> Result<()> {
    let mut rows = Vec::new();
    for &t in &args.threads_list {
        let (tok_s, params) = measure(&args, t.max(1))?;
        if !args.json {
            println!(
                "lucent train  threads {t}  {tok_s:>8.0} tok/s  ({params} parameters, {}, d {}, {}, block {}, batch {})",
                count(args.layers, "layer", "layers"),
                args.d_model,
                count(args.heads, "head", "heads"),
                args.block,
                args.batch
            );
        }
        rows.push(serde_json::json!({"threads": t, "tok_s": tok_s, "parameters": params}));
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "engine": "lucent",
                "config": {"layers": args.layers, "d_model": args.d_model, "heads": args.heads, "block": args.block, "batch": args.batch, "vocab": args.vocab},
                "results": rows
            })
        );
    }
    Ok(())
}
