//! `lucent bench embed`: sentence-embedding throughput and latency of a real encoder
//! (all-MiniLM-L6-v2 by default) on 256 fixed English sentences (benches/sentences.txt,
//! built into the binary), batch 32, at each thread count asked for.
//!
//! throughput = sentences / median wall time of a full pass (tokenize → encode → pool →
//! normalise), after one warm-up pass; latency = median time of one sentence alone.
//! Each thread count runs inside its own lucent runtime of that size, so 1 thread means 1.
//! `scripts/bench-embed-peer.sh` runs sentence-transformers on the same input.

use std::time::Instant;

use lucent::{Error, Result};

use crate::commands::numbers::at_least;
use crate::loader::embedder_in as load_embedder;
use crate::show::count;

/// The benchmark's 256 sentences, one per line.
pub const SENTENCES: &str = include_str!("../../../../benches/sentences.txt");

/// Arguments of `lucent bench embed`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(after_help = "Example: lucent bench embed --threads-list 1,2 --runs 5")]
pub struct EmbedBenchArgs {
    /// A model name (see `lucent models`) or a local folder in Hugging Face layout.
    #[arg(long, short = 'm', default_value = "minilm")]
    pub model: String,
    /// Thread counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = at_least::<1, usize>)]
    pub threads_list: Vec<usize>,
    /// Sentences per forward pass.
    #[arg(long, default_value_t = 32, value_parser = at_least::<1, usize>)]
    pub batch: usize,
    /// Timed passes per thread count (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = at_least::<1, usize>)]
    pub runs: usize,
    /// Single sentences timed for the latency figure.
    #[arg(long, default_value_t = 50, value_parser = at_least::<0, usize>)]
    pub latency_samples: usize,
    /// How the encoder's products are computed (`exact`, `bf16` or `int8`; `lucent bench
    /// precision` puts them side by side with their distance to exact).
    #[arg(long, default_value = "exact", value_parser = crate::commands::embed::parse_precision)]
    pub precision: lucent::Precision,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Run `lucent bench embed`.
pub fn run(args: EmbedBenchArgs) -> Result<()> {
    if args.runs == 0 || args.batch == 0 || args.threads_list.contains(&0) {
        return Err(Error::Argument(
            "--runs, --batch and every --threads-list entry must be at least 1".into(),
        ));
    }
    let sentences: Vec<&str> = SENTENCES.lines().filter(|l| !l.trim().is_empty()).collect();
    let embedder = load_embedder(&args.model, args.precision)?;
    let mut rows = Vec::new();
    for &n in &args.threads_list {
        let pool = lucent::Runtime::builder().threads(n).build()?;
        let measured = pool.install(|| -> Result<(f64, f64)> {
            embedder.embed_batched(&sentences[..64.min(sentences.len())], args.batch)?; // warm-up
            let mut times = Vec::with_capacity(args.runs);
            for _ in 0..args.runs {
                let t0 = Instant::now();
                embedder.embed_batched(&sentences, args.batch)?;
                times.push(t0.elapsed().as_secs_f64());
            }
            let mut lat = Vec::with_capacity(args.latency_samples);
            for s in sentences.iter().cycle().take(args.latency_samples) {
                let t0 = Instant::now();
                embedder.embed_one(s)?;
                lat.push(t0.elapsed().as_secs_f64());
            }
            Ok((median(times), median(lat)))
        });
        let (pass, lat) = measured?;
        rows.push((n, pass, sentences.len() as f64 / pass, lat * 1e3));
        if !args.json {
            eprintln!(
                "threads {n}: {:.1} sentences/s, latency {:.2} ms",
                sentences.len() as f64 / pass,
                lat * 1e3
            );
        }
    }
    if args.json {
        let v = serde_json::json!({
            "model": embedder.name(),
            "precision": embedder.precision().name(),
            "sentences": sentences.len(),
            "batch": args.batch,
            "runs": args.runs,
            "threads": rows.iter().map(|(n, pass, sps, lat)| serde_json::json!({
                "threads": n, "median_s": pass, "sentences_per_s": sps, "latency_ms": lat,
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "\n{} ({}) on {} sentences, batch {}, median of {}",
        embedder.name(),
        embedder.precision(),
        sentences.len(),
        args.batch,
        count(args.runs, "run", "runs")
    );
    println!(
        "{:>8} {:>12} {:>14} {:>12}",
        "threads", "pass (s)", "sentences/s", "latency ms"
    );
    for (n, pass, sps, lat) in rows {
        println!("{n:>8} {pass:>12.3} {sps:>14.1} {lat:>12.2}");
    }
    Ok(())
}
