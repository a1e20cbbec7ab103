//! Timings of lucent's kernels, each beside its plain `reference` twin, for
//! `lucent bench kernels`: the kernels stay private to the library, and this is the one
//! door through which a benchmark reaches them.
//!
//! Each figure is the median over several runs of the time per call, where one run
//! repeats the call until it has taken at least a set time (so short kernels are timed
//! over many calls). Inputs are made once before timing; outputs are kept so the work
//! cannot be optimised away. Kernels run on the calling thread's runtime (see
//! [`crate::Runtime::install`]).

use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::{rngs::StdRng, SeedableRng};

use crate::ops::attention::{self, AttentionParams};
use crate::ops::rope::{self, RopeTable};
use crate::ops::{self, matmul, norm, softmax, Activation, RopeConvention};
use crate::{Result, Tensor};

/// What [`kernels`] measures and how long.
#[derive(Clone, Debug)]
pub struct KernelBench {
    /// Runs per kernel; the median is reported.
    pub runs: usize,
    /// Least time of one run (calls are repeated to fill it).
    pub min_run: Duration,
    /// Only kernels whose name contains this text (e.g. `matmul`).
    pub only: Option<String>,
    /// Also time the plain twins.
    pub twins: bool,
}

impl Default for KernelBench {
    fn default() -> Self {
        KernelBench {
            runs: 15,
            min_run: Duration::from_millis(10),
            only: None,
            twins: true,
        }
    }
}

/// One measured kernel.
#[derive(Clone, Debug)]
pub struct KernelTiming {
    /// The kernel (`"matmul 1x576x1536"`, `"softmax"`, ...).
    pub name: String,
    /// Its input's shape, in words.
    pub shape: String,
    /// Median seconds per call.
    pub secs: f64,
    /// Fastest run's seconds per call (less sensitive to a busy machine).
    pub best: f64,
    /// Work per call: flops for matmul (a multiply-add is 2), elements otherwise.
    pub work: f64,
    /// The unit of `work / secs` as printed: `"GFLOP/s"` or `"Melem/s"`.
    pub unit: &'static str,
    /// Median seconds per call of the plain twin (for a one-row matmul: the `gemm`
    /// crate alone, which the matrix-vector kernel replaces).
    pub twin_secs: Option<f64>,
    /// (m, k, n) of a matrix product.
    pub mkn: Option<[usize; 3]>,
}

impl KernelTiming {
    /// Work per second in `unit`s, at the median and at the best run.
    pub fn rates(&self) -> (f64, f64) {
        let scale = if self.unit == "GFLOP/s" { 1e9 } else { 1e6 };
        (self.work / self.secs / scale, self.work / self.best / scale)
    }
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

    /// (median, fastest) seconds per call of `f` and of `g`, their runs interleaved (f's
    /// run, g's run, f's, ...) so that a change in the machine's load falls on both.
    fn time_pair(&self, mut f: impl FnMut(), mut g: impl FnMut()) -> ((f64, f64), (f64, f64)) {
        let reps = |h: &mut dyn FnMut()| -> u64 {
            h();
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < self.min / 4 || calls == 0 {
                h();
                calls += 1;
            }
            let per_call = start.elapsed().as_secs_f64() / calls as f64;
            ((self.min.as_secs_f64() / per_call).ceil() as u64).max(1)
        };
        let (rf, rg) = (reps(&mut f), reps(&mut g));
        let run = |h: &mut dyn FnMut(), n: u64| -> f64 {
            let t = Instant::now();
            for _ in 0..n {
                h();
            }
            t.elapsed().as_secs_f64() / n as f64
        };
        let (mut sf, mut sg) = (Vec::new(), Vec::new());
        for _ in 0..self.runs.max(1) {
            sf.push(run(&mut f, rf));
            sg.push(run(&mut g, rg));
        }
        let med = |mut v: Vec<f64>| -> (f64, f64) {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[0])
        };
        (med(sf), med(sg))
    }
}

/// Time the kernels: matrix products at MiniLM and SmolLM2 shapes (GFLOP/s), softmax,
/// norms, activations, RoPE from a cached table and fused attention (elements/s), each
/// with its twin unless `b.twins` is off.
pub fn kernels(b: &KernelBench) -> Result<Vec<KernelTiming>> {
    // On a thread of the runtime's pool, as a model's forward runs them.
    crate::threads::in_pool(|| kernels_here(b))
}

/// [`kernels`] on the calling thread.
fn kernels_here(b: &KernelBench) -> Result<Vec<KernelTiming>> {
    let timer = Timer {
        runs: b.runs,
        min: b.min_run.max(Duration::from_millis(1)),
    };
    let wanted = |name: &str| b.only.as_deref().is_none_or(|o| name.contains(o));
    let mut rng = StdRng::seed_from_u64(0);
    let mut rows: Vec<KernelTiming> = Vec::new();

    // The core's ceiling: fused multiply-adds alone (the products below are measured
    // against it).
    if wanted("fma peak") {
        const ROUNDS: usize = 100_000;
        let secs = timer.time(|| {
            black_box(crate::ops::simd::fma_peak(black_box(ROUNDS)));
        });
        rows.push(KernelTiming {
            name: "fma peak".into(),
            shape: "12 independent chains of 8-lane FMAs: one core's ceiling".into(),
            secs: secs.0,
            best: secs.1,
            work: 2.0 * (ROUNDS * 96) as f64, // 12 chains × 8 lanes per round
            unit: "GFLOP/s",
            twin_secs: None,
            mkn: None,
        });
    }

    // Matrix products, as Linear layers use them: x (m, k) · W (n, k)ᵀ.
    let shapes: [(&str, [usize; 3]); 8] = [
        ("MiniLM FFN up, 32×24 tokens", [768, 384, 1536]),
        ("MiniLM attention projection", [768, 384, 384]),
        ("MiniLM FFN down", [768, 1536, 384]),
        (
            "Whisper tiny encoder FFN up, 1500 frames",
            [1500, 384, 1536],
        ),
        ("Whisper base encoder FFN down", [1500, 2048, 512]),
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
        // What a Linear layer runs: one row, the matrix-vector kernel; more, lucent's
        // own kernel (ops::linear_kernel). Beside it, the gemm crate on the same
        // product: the choice measured.
        let (secs, best) = if m == 1 {
            timer.time(|| matmul::gemm_into(&mut c, x.data(), w.data(), m, k, n, true))
        } else {
            timer.time(|| ops::linear_kernel::matmul_nt(&mut c, x.data(), w.data(), None, m, k, n))
        };
        let twin_secs = Some(
            timer
                .time(|| matmul::gemm_crate_into(&mut c, x.data(), w.data(), m, k, n, true))
                .0,
        );
        black_box(&c);
        rows.push(KernelTiming {
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

    let twins = b.twins;
    let mut push =
        |name: &str, shape: &[usize], (secs, best): (f64, f64), twin_secs: Option<(f64, f64)>| {
            rows.push(KernelTiming {
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
        let (g, bias) = (
            Tensor::full(&[shape[1]], 1.1),
            Tensor::full(&[shape[1]], 0.1),
        );
        let secs = timer.time(|| drop(black_box(ops::layer_norm(&x, &g, Some(&bias), 1e-12))));
        let twin = twins.then(|| {
            timer.time(|| {
                let mut y = x.clone();
                y.data_mut().chunks_mut(shape[1]).for_each(|r| {
                    norm::reference::layer_norm_row(r, g.data(), Some(bias.data()), 1e-12)
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
    // Fused attention: MiniLM (12 heads of 32, 128 tokens), a SmolLM2 decode step
    // (9 query heads on 3 kv heads of 64, 512 cached positions) in lucent's numerics,
    // causal prompts at GPT-2 small's heads (12 of 64, 256 tokens) and a Whisper tiny
    // decoder step's self-attention (6 heads of 64, 100 cached tokens). Work = scores
    // t_q·t_k. With the twin, kernel and twin runs interleave.
    for (name, [bs, h, h_kv, t_q, t_k, d], causal) in [
        ("attention", [1usize, 12, 12, 128, 128, 32], false),
        ("attention decode", [1, 9, 3, 1, 512, 64], true),
        ("attention causal gpt2", [1, 12, 12, 256, 256, 64], true),
        ("attention causal whisper step", [1, 6, 6, 1, 100, 64], true),
    ] {
        if !wanted(name) {
            continue;
        }
        let q = Tensor::randn(&[bs, h, t_q, d], 1.0, &mut rng);
        let k = Tensor::randn(&[bs, h_kv, t_k, d], 1.0, &mut rng);
        let v = Tensor::randn(&[bs, h_kv, t_k, d], 1.0, &mut rng);
        let p = AttentionParams {
            causal,
            ..AttentionParams::new(d)
        };
        let kernel = || drop(black_box(attention::attention(&q, &k, &v, &p)));
        let twin = || drop(black_box(attention::reference::attention(&q, &k, &v, &p)));
        let (secs, twin) = if twins {
            let (secs, twin) = timer.time_pair(kernel, twin);
            (secs, Some(twin))
        } else {
            (timer.time(kernel), None)
        };
        push(name, &[bs, h, t_q, t_k], secs, twin);
    }
    Ok(rows)
}
