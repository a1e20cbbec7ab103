//! `lucent bench interventions -m MODEL`: what an intervention costs.
//!
//! (a) a plain forward pass over a short prompt (every position's logits, the untraced
//! path); (b) the same pass with one intervention (a head's zero ablation at
//! `blocks.L.attn.hook_z`), as `Intervened::logits_of` runs it (a trace that records
//! nothing and applies the edit at its hook point); (c) for comparison, a traced pass
//! that records every intermediate (`Model::trace`). (a), (b) and (c) run in
//! interleaved rounds (the order rotating each round) so that a busy machine slows them
//! alike; the medians and the ratio (b)/(a) are printed (the target: ≤ 1.3×).
//! Then (d), unless `--no-sweep`: the full head-ablation sweep
//! (`Model::head_ablation_sweep`, one intervened pass per head) over the same prompt,
//! its wall time (target for SmolLM2's 270 heads on 10 tokens at 2 threads: < 60 s),
//! with a progress bar.

use std::time::Instant;

use lucent::{Error, HeadAblation, Intervention, Result};

use crate::commands::numbers::at_least;
use crate::loader;

/// Arguments of `lucent bench interventions`.
#[derive(clap::Args)]
#[command(
    after_help = "The full sweep (every head of every layer) is the default; --layers cuts it.\n\nExamples:\n  lucent bench interventions -m smollm2 --threads 2 --layers 29-29\n  lucent bench interventions --rounds 5 --no-sweep --json"
)]
pub struct Args {
    /// Model: a known name (smollm2, gemma3), a .gguf path or a decoder folder.
    #[arg(long, short = 'm', default_value = "smollm2")]
    pub model: String,
    /// The prompt (as is, no chat template); SmolLM2 makes it 10 tokens.
    #[arg(
        long,
        default_value = "The history of the printing press begins in the fifteenth"
    )]
    pub text: String,
    /// The head zero-ablated in (b), as LAYER.HEAD.
    #[arg(long, default_value = "5.1")]
    pub head: String,
    /// Interleaved rounds of (a), (b) and (c); medians are reported.
    #[arg(long, default_value_t = 21, value_parser = at_least::<1, usize>)]
    pub rounds: usize,
    /// Leave out the head-ablation sweep (d).
    #[arg(long)]
    pub no_sweep: bool,
    /// With the sweep: only these layers, FIRST-LAST [default: all].
    #[arg(long, value_name = "FIRST-LAST")]
    pub layers: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Run `lucent bench interventions`.
pub fn run(a: Args) -> Result<()> {
    let model = loader::open(&a.model)?;
    let cfg = model.config().clone();
    let tm = model.text_model()?;
    let ids = tm.encode(&a.text)?;
    let bad_head = || {
        Error::Argument(format!(
            "--head {}: write LAYER.HEAD with layer 0-{} and head 0-{} (e.g. 5.1)",
            a.head,
            cfg.decoder_layers.max(1) - 1,
            cfg.n_heads.max(1) - 1
        ))
    };
    let (l, h) = a.head.split_once('.').ok_or_else(bad_head)?;
    let (l, h): (usize, usize) = (
        l.trim().parse().map_err(|_| bad_head())?,
        h.trim().parse().map_err(|_| bad_head())?,
    );
    let layers = super::intervene::layer_range(a.layers.as_deref(), cfg.decoder_layers.max(1))?;
    let view = model.intervene(&[Intervention::zero(format!("blocks.{l}.attn.hook_z")).head(h)])?;
    let threads = lucent::threads(); // the global --threads (default: physical cores)
    let (mut plain, mut edited, mut traced) = (Vec::new(), Vec::new(), Vec::new());
    {
        // One of each first, untimed (caches, the pool's threads).
        tm.model.forward(&ids, None, false, None)?;
        view.logits_of(&ids)?;
        for round in 0..a.rounds {
            for k in 0..3 {
                let t0 = Instant::now();
                match (round + k) % 3 {
                    0 => {
                        tm.model.forward(&ids, None, false, None)?;
                        plain.push(t0.elapsed().as_secs_f64());
                    }
                    1 => {
                        view.logits_of(&ids)?;
                        edited.push(t0.elapsed().as_secs_f64());
                    }
                    _ => {
                        let mut trace = lucent::Trace::new();
                        tm.model.forward(&ids, None, false, Some(&mut trace))?;
                        traced.push(t0.elapsed().as_secs_f64());
                    }
                }
            }
        }
    }
    let (pa, pb, pc) = (median(plain), median(edited), median(traced));
    if !a.json {
        println!(
            "{}: {} tokens, {} thread(s), median of {} interleaved rounds",
            model.name(),
            ids.len(),
            threads,
            a.rounds
        );
        println!(
            "(a) plain pass                         {:>9.2} ms",
            pa * 1e3
        );
        println!(
            "(b) pass with head {l}.{h} zero-ablated   {:>9.2} ms  = {:.2}× (a) (target ≤ 1.3×)",
            pb * 1e3,
            pb / pa
        );
        println!(
            "(c) traced pass recording everything   {:>9.2} ms  = {:.2}× (a)",
            pc * 1e3,
            pc / pa
        );
    }
    let mut sweep = serde_json::Value::Null;
    if !a.no_sweep {
        let text = &a.text;
        let n = (layers.end() - layers.start() + 1) * cfg.n_heads;
        let progress = super::intervene::bar(n, "ablating heads");
        let t0 = Instant::now();
        let logits = model.intervene(&[])?.next_token_logits(text)?;
        let target = lucent::pipeline::generate::argmax(&logits);
        let base = lucent::log_prob(&logits, target)?;
        let effects = model.head_ablation_sweep(
            text,
            target,
            base,
            layers.clone(),
            HeadAblation::Zero,
            &mut |done, _| progress.set_position(done as u64),
        )?;
        progress.finish_and_clear();
        let secs = t0.elapsed().as_secs_f64();
        if !a.json {
            println!(
                "(d) head-ablation sweep: {} heads in {secs:.1} s ({:.1} ms a head; target for 270 heads < 60 s)",
                effects.len(),
                secs * 1e3 / effects.len().max(1) as f64
            );
        }
        sweep = serde_json::json!({"heads": effects.len(), "seconds": secs});
    }
    if a.json {
        let v = serde_json::json!({
            "model": model.name(),
            "text": a.text,
            "tokens": ids.len(),
            "threads": threads,
            "rounds": a.rounds,
            "statistic": "median seconds per pass",
            "plain_s": pa,
            "intervened_s": pb,
            "traced_s": pc,
            "intervened_ratio": pb / pa,
            "traced_ratio": pc / pa,
            "ablated_head": [l, h],
            "sweep": sweep,
        });
        println!("{v:#}");
    }
    Ok(())
}
