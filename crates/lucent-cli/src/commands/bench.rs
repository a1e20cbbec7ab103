//! `lucent bench TARGET`: how fast lucent runs, measured the same way every time.
//!
//! Each figure is the median over several runs of the time per call, where one run
//! repeats the call until it has taken at least a set time (so short kernels are timed
//! over many calls). Inputs are made once before timing; outputs are kept so the work
//! cannot be optimised away.
//!
//! Targets: `kernels` — matrix products at MiniLM and SmolLM2 shapes (GFLOP/s, counting
//! a multiply-add as 2 flops), softmax, norms, activations and fused attention
//! (elements/s), RoPE from a cached table, each beside its plain `reference` twin.

use std::hint::black_box;
use std::time::{Duration, Instant};

use lucent::ops::attention::{self, AttentionParams};
use lucent::ops::rope::{self, RopeTable};
use lucent::ops::{self, matmul, norm, softmax, Activation, RopeConvention};
use lucent::{Result, Tensor};
use rand::{rngs::StdRng, SeedableRng};

/// Arguments of `lucent bench`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  lucent bench kernels --threads 2 --json\n  lucent bench embed --threads-list 1,2\n  lucent bench train\n  lucent bench generate -m smollm2\n  lucent bench transcribe -m whisper-tiny.en speech.wav --threads-list 1 --rounds 1"
)]
pub struct Args {
    #[command(subcommand)]
    target: Target,
}

/// What to benchmark.
#[derive(clap::Subcommand)]
enum Target {
    /// The kernels: matmul (GFLOP/s), softmax, norms, activations, RoPE, attention.
    Kernels(KernelArgs),
    /// Sentence embeddings of a real encoder: sentences/s and single-sentence latency.
    Embed(super::bench_embed::EmbedBenchArgs),
    /// Training throughput (tokens/s) of a fixed tiny GPT at 1 and 2 threads.
    Train(super::bench_train::Args),
    /// Prefill and decode speed of a decoder model (tok/s at 1 and 2 threads).
    Generate(super::bench_generate::GenerateBenchArgs),
    /// Whisper transcription: real-time factor and ms per token, per 30-s window.
    Transcribe(super::bench_transcribe::Args),
}

/// Options of `lucent bench kernels`.
#[derive(clap::Args)]
struct KernelArgs {
    /// Runs per kernel; the median is reported.
    #[arg(long, default_value_t = 15)]
    runs: usize,
    /// Least time of one run, in milliseconds (calls are repeated to fill it).
    #[arg(long, default_value_t = 10)]
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
    }
}

/// One measured kernel.
struct Row {
    name: String,
    shape: String,
    /// Median seconds per call.
    secs: f64,
    /// Fastest run's seconds per call (less sensitive to a busy machine).
    best: f64,
    /// Work per call: flops for matmul, elements otherwise.
    work: f64,
    unit: &'static str,
    /// Median seconds per call of the plain twin.
    twin_secs: Option<f64>,
    /// (m, k, n) of a matrix product.
    mkn: Option<[usize; 3]>,
}

struct Timer {
    runs: usize,
    min: Duration,
}

impl Timer {
    /// (median, fastest) seconds per call of `f` over the runs.
    fn time(&self, mut f: impl FnMut()) -> (f64, f64) {
        // Warm up and calibrate: how many calls fill one run.
        f();
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed() < self.min / 4 || calls == 0 {
            f();
            calls += 1;
        }
        let per_call = start.elapsed().as_secs_f64() / calls as f64;
        let reps = ((self.min.as_secs_f64() / per_call).ceil() as u64).max(1);
        let mut samples: Vec<f64> = (0..self.runs.max(1))
            .map(|_| {
                let t = Instant::now();
                for _ in 0..reps {
                    f();
                }
                t.elapsed().as_secs_f64() / reps as f64
            })
            .collect();
        samples.sort_by(f64::total_cmp);
        (samples[samples.len() / 2], samples[0])
    }
}

fn kernels(a: KernelArgs) -> Result<()> {
    let timer = Timer {
        runs: a.runs,
        min: Duration::from_millis(a.min_ms.max(1)),
    };
    let wanted = |name: &str| a.only.as_deref().is_none_or(|o| name.contains(o));
    let mut rng = StdRng::seed_from_u64(0);
    let mut rows: Vec<Row> = Vec::new();

    // Matrix products, as Linear layers use them: x (m, k) · W (n, k)ᵀ.
    let shapes: [(&str, [usize; 3]); 6] = [
        ("MiniLM FFN up, 32×24 tokens", [768, 384, 1536]),
        ("MiniLM attention projection", [768, 384, 384]),
        ("MiniLM FFN down", [768, 1536, 384]),
        ("SmolLM2 decode, gate/up", [1, 576, 1536]),
        ("SmolLM2 decode, q/o", [1, 576, 576]),
        ("SmolLM2 decode, down", [1, 1536, 576]),
    ];
    for (what, [m, k, n]) in shapes {
        let name = format!("matmul {m}x{k}x{n}");
        if !wanted(&name) {
            continue;
        }
        let x = Tensor::randn(&[m, k], 1.0, &mut rng);
        let w = Tensor::randn(&[n, k], 1.0, &mut rng);
        let mut c = vec![0.0f32; m * n];
        let (secs, best) =
            timer.time(|| matmul::gemm_into(&mut c, x.data(), w.data(), m, k, n, true));
        // For one row, also the gemm crate alone: the choice gemm_into makes, measured.
        let twin_secs = (m == 1).then(|| {
            timer
                .time(|| matmul::gemm_crate_into(&mut c, x.data(), w.data(), m, k, n, true))
                .0
        });
        black_box(&c);
        rows.push(Row {
            name,
            shape: format!("({m},{k})·({n},{k})ᵀ {what}"),
            secs,
            best,
            work: 2.0 * (m * k * n) as f64,
            unit: "GFLOP/s",
            twin_secs,
            mkn: Some([m, k, n]),
        });
    }

    let twins = !a.no_twins;
    let mut push =
        |name: &str, shape: &[usize], (secs, best): (f64, f64), twin_secs: Option<(f64, f64)>| {
            rows.push(Row {
                name: name.to_string(),
                shape: format!("{shape:?}"),
                secs,
                best,
                work: shape.iter().product::<usize>() as f64,
                unit: "Melem/s",
                twin_secs: twin_secs.map(|t| t.0),
                mkn: None,
            });
        };

    let shape = [768, 384];
    if wanted("softmax") {
        let x = Tensor::randn(&shape, 3.0, &mut rng);
        let secs = timer.time(|| drop(black_box(ops::softmax(&x))));
        let twin = twins.then(|| {
            timer.time(|| {
                let mut y = x.clone();
                y.data_mut()
                    .chunks_mut(shape[1])
                    .for_each(|r| softmax::reference::softmax_row(r, 1.0));
                black_box(y);
            })
        });
        push("softmax", &shape, secs, twin);
    }
    if wanted("layer_norm") {
        let x = Tensor::randn(&shape, 1.0, &mut rng);
        let (g, b) = (
            Tensor::full(&[shape[1]], 1.1),
            Tensor::full(&[shape[1]], 0.1),
        );
        let secs = timer.time(|| drop(black_box(ops::layer_norm(&x, &g, Some(&b), 1e-12))));
        let twin = twins.then(|| {
            timer.time(|| {
                let mut y = x.clone();
                y.data_mut().chunks_mut(shape[1]).for_each(|r| {
                    norm::reference::layer_norm_row(r, g.data(), Some(b.data()), 1e-12)
                });
                black_box(y);
            })
        });
        push("layer_norm", &shape, secs, twin);
    }
    for shape in [[768usize, 576], [1, 576]] {
        if !wanted("rms_norm") {
            break;
        }
        let x = Tensor::randn(&shape, 1.0, &mut rng);
        let g = Tensor::full(&[shape[1]], 1.1);
        let secs = timer.time(|| drop(black_box(ops::rms_norm(&x, &g, 1e-5))));
        let twin = twins.then(|| {
            timer.time(|| {
                let mut y = x.clone();
                y.data_mut()
                    .chunks_mut(shape[1])
                    .for_each(|r| norm::reference::rms_norm_row(r, g.data(), 1e-5));
                black_box(y);
            })
        });
        push("rms_norm", &shape, secs, twin);
    }
    let shape = [768, 1536];
    for act in [Activation::Gelu, Activation::GeluTanh, Activation::Silu] {
        if !wanted(act.name()) {
            continue;
        }
        let x = Tensor::randn(&shape, 2.0, &mut rng);
        let secs = timer.time(|| drop(black_box(act.apply(&x))));
        let twin = twins.then(|| timer.time(|| drop(black_box(x.map(|v| act.scalar(v))))));
        push(act.name(), &shape, secs, twin);
    }
    // RoPE from a cached table: SmolLM2's 9 query heads of 64 over 128 positions.
    for conv in [RopeConvention::RotateHalf, RopeConvention::Interleaved] {
        let name = match conv {
            RopeConvention::RotateHalf => "rope rotate_half",
            RopeConvention::Interleaved => "rope interleaved",
        };
        if !wanted(name) {
            continue;
        }
        let shape = [1, 9, 128, 64];
        let x = Tensor::randn(&shape, 1.0, &mut rng);
        let positions: Vec<usize> = (0..shape[2]).collect();
        let table = RopeTable::new(100_000.0, shape[3], 0..shape[2])?;
        let secs = timer.time(|| drop(black_box(table.apply(&x, &positions, conv))));
        let twin = twins.then(|| {
            timer.time(|| {
                let mut y = x.clone();
                for (i, row) in y.data_mut().chunks_mut(shape[3]).enumerate() {
                    rope::reference::rotate_row(row, positions[i % shape[2]], 100_000.0, conv);
                }
                black_box(y);
            })
        });
        push(name, &shape, secs, twin);
    }
    // Fused attention: MiniLM (12 heads of 32, 128 tokens) and a SmolLM2 decode step
    // (9 query heads on 3 kv heads of 64, 512 cached positions). Work = scores t_q·t_k.
    for (name, [b, h, h_kv, t_q, t_k, d], causal) in [
        ("attention", [1usize, 12, 12, 128, 128, 32], false),
        ("attention decode", [1, 9, 3, 1, 512, 64], true),
    ] {
        if !wanted(name) {
            continue;
        }
        let q = Tensor::randn(&[b, h, t_q, d], 1.0, &mut rng);
        let k = Tensor::randn(&[b, h_kv, t_k, d], 1.0, &mut rng);
        let v = Tensor::randn(&[b, h_kv, t_k, d], 1.0, &mut rng);
        let p = AttentionParams {
            causal,
            ..AttentionParams::new(d)
        };
        let secs = timer.time(|| drop(black_box(attention::attention(&q, &k, &v, &p))));
        let twin = twins.then(|| {
            timer.time(|| drop(black_box(attention::reference::attention(&q, &k, &v, &p))))
        });
        push(name, &[b, h, t_q, t_k], secs, twin);
    }

    let threads = lucent::threads();
    if a.json {
        let v = serde_json::json!({
            "threads": threads,
            "runs": a.runs,
            "min_ms": a.min_ms,
            "statistic": "median seconds per call",
            "results": rows.iter().map(|r| {
                let scale = if r.unit == "GFLOP/s" { 1e9 } else { 1e6 };
                serde_json::json!({
                    "name": r.name,
                    "shape": r.shape,
                    "median_s": r.secs,
                    "best_s": r.best,
                    "rate": r.work / r.secs / scale,
                    "best_rate": r.work / r.best / scale,
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
        "lucent kernels, {threads} thread(s); median of {} runs of ≥ {} ms each\n",
        a.runs, a.min_ms
    );
    println!(
        "{:<22} {:>10} {:>17} {:>17}  {:>10} {:>7}  shape",
        "kernel", "median", "rate (median)", "rate (best run)", "twin/alt", "speedup"
    );
    for r in &rows {
        let scale = if r.unit == "GFLOP/s" { 1e9 } else { 1e6 };
        let (twin, speed) = match r.twin_secs {
            Some(t) => (fmt_time(t), format!("{:.1}×", t / r.secs)),
            None => (String::from("-"), String::from("-")),
        };
        println!(
            "{:<22} {:>10} {:>17} {:>17}  {:>10} {:>7}  {}",
            r.name,
            fmt_time(r.secs),
            format!("{:.1} {}", r.work / r.secs / scale, r.unit),
            format!("{:.1} {}", r.work / r.best / scale, r.unit),
            twin,
            speed,
            r.shape
        );
    }
    println!(
        "\ntwin/alt: the plain `reference` twin; for one-row matmul, the gemm crate alone \
         (what the matrix-vector kernel replaces)."
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
