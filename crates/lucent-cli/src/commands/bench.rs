//! `lucent bench TARGET`: how fast lucent runs, measured the same way every time.
//!
//! Each figure is the median over several runs of the time per call, where one run
//! repeats the call until it has taken at least a set time (so short kernels are timed
//! over many calls). The kernels are timed by the library (`lucent::bench::kernels`;
//! they are private to it); this file prints the figures.
//!
//! Targets: `kernels` — matrix products at MiniLM and SmolLM2 shapes (GFLOP/s, counting
//! a multiply-add as 2 flops), softmax, norms, activations and fused attention
//! (elements/s), RoPE from a cached table, each beside its plain `reference` twin.

use std::time::Duration;

use crate::commands::numbers::at_least;
use crate::show::count;
use lucent::Result;

/// Arguments of `lucent bench`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent bench kernels --threads 2 --json\n  lucent bench embed --threads-list 1,2\n  lucent bench train\n  lucent bench generate -m smollm2\n  lucent bench transcribe -m whisper-tiny.en examples/speech.wav --threads-list 1 --rounds 1\n  lucent bench precision -m minilm --runs 1\n  lucent bench interventions -m smollm2 --no-sweep"
)]
pub struct Args {
    #[command(subcommand)]
    target: Target,
}

/// What to benchmark.
#[derive(clap::Subcommand)]
enum Target {
    /// The kernels: FMA peak, matmul (GFLOP/s), softmax, norms, activations, RoPE, attention.
    Kernels(KernelArgs),
    /// Sentence embeddings of a real encoder: sentences/s and single-sentence latency.
    Embed(super::bench_embed::EmbedBenchArgs),
    /// Training throughput (tokens/s) of a fixed tiny GPT at 1 and 2 threads.
    Train(super::bench_train::Args),
    /// Prefill and decode speed of a decoder model (tok/s at 1 and 2 threads).
    Generate(super::bench_generate::GenerateBenchArgs),
    /// Whisper transcription: real-time factor and ms per token, per 30-s window.
    Transcribe(super::bench_transcribe::Args),
    /// Each precision (exact, bf16, int8) of an encoder side by side: speed and distance to exact.
    Precision(super::bench_precision::Args),
    /// What an intervention costs: a plain pass beside one with a head ablated, and the full head-ablation sweep.
    Interventions(super::bench_interventions::Args),
}

/// Options of `lucent bench kernels`.
#[derive(clap::Args)]
#[command(allow_negative_numbers = true)]
struct KernelArgs {
    /// Runs per kernel; the median is reported.
    #[arg(long, default_value_t = 15, value_parser = at_least::<0, usize>)]
    runs: usize,
    /// Least time of one run, in milliseconds (calls are repeated to fill it).
    #[arg(long, default_value_t = 10, value_parser = at_least::<0, u64>)]
    min_ms: u64,
    /// Only kernels whose name contains this text (e.g. `matmul`) [default: all].
    #[arg(long)]
    only: Option<String>,
    /// Skip timing the plain twins.
    #[arg(long)]
    no_twins: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Run `lucent bench`.
pub fn run(args: Args) -> Result<()> {
    match args.target {
        Target::Kernels(a) => kernels(a),
        Target::Embed(a) => super::bench_embed::run(a),
        Target::Train(a) => super::bench_train::run(a),
        Target::Generate(a) => super::bench_generate::run(a),
        Target::Transcribe(a) => super::bench_transcribe::run(a),
        Target::Precision(a) => super::bench_precision::run(a),
        Target::Interventions(a) => super::bench_interventions::run(a),
    }
}

fn kernels(a: KernelArgs) -> Result<()> {
    let rows = lucent::bench::kernels(&lucent::bench::KernelBench {
        runs: a.runs,
        min_run: Duration::from_millis(a.min_ms.max(1)),
        only: a.only.clone(),
        twins: !a.no_twins,
    })?;
    let threads = lucent::threads();
    if a.json {
        let v = serde_json::json!({
            "threads": threads,
            "runs": a.runs,
            "min_ms": a.min_ms,
            "statistic": "median seconds per call",
            "results": rows.iter().map(|r| {
                let (rate, best_rate) = r.rates();
                serde_json::json!({
                    "name": r.name,
                    "shape": r.shape,
                    "median_s": r.secs,
                    "best_s": r.best,
                    "rate": rate,
                    "best_rate": best_rate,
                    "unit": r.unit,
                    "twin_median_s": r.twin_secs,
                    "mkn": r.mkn,
                })
            }).collect::<Vec<_>>(),
        });
        println!("{v:#}");
        return Ok(());
    }
    println!(
        "lucent kernels, {threads} thread(s); median of {} of ≥ {} ms each\n",
        count(a.runs, "run", "runs"),
        a.min_ms
    );
    println!(
        "{:<22} {:>10} {:>17} {:>17}  {:>10} {:>7}  shape",
        "kernel", "median", "rate (median)", "rate (best run)", "twin/alt", "speedup"
    );
    for r in &rows {
        let (rate, best_rate) = r.rates();
        let (twin, speed) = match r.twin_secs {
            Some(t) => (fmt_time(t), format!("{:.1}×", t / r.secs)),
            None => (String::from("-"), String::from("-")),
        };
        println!(
            "{:<22} {:>10} {:>17} {:>17}  {:>10} {:>7}  {}",
            r.name,
            fmt_time(r.secs),
            format!("{rate:.1} {}", r.unit),
            format!("{best_rate:.1} {}", r.unit),
            twin,
            speed,
            r.shape
        );
    }
    println!(
        "\ntwin/alt: the plain `reference` twin; for matmul, the gemm crate on the same \
         product (what lucent's matrix-vector kernel and linear kernel replace)."
    );
    Ok(())
}

fn fmt_time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}
