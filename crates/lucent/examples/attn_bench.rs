//! Speed of one decode step's attention in llama.cpp's arithmetic (`ops::attention` with
//! `AttentionParams::numerics`, which runs `ops::attention::llama_cpp::attention`)
//! at SmolLM2's shapes (9 query heads sharing 3 KV heads of 64 numbers), K and V in
//! cache, at 1 thread and, from a pool thread as the decoder runs it, at 2.
//!
//! `cargo run --release -p lucent --example attn_bench`
//!
//! Prints, per number of cached keys, the best time of a call and the time per key and
//! head. Then, in lucent's numerics, causal attention's fused kernel beside its plain
//! twin at GPT-2 small's and a Whisper tiny decoder step's shapes (`lucent::bench`'s
//! "attention causal" rows: medians of 15 interleaved runs, one thread).

use std::time::Instant;

use lucent::ops::AttentionParams;
use lucent::tensor::Tensor;

fn main() -> lucent::Result<()> {
    let rt = lucent::Runtime::builder().threads(2).build()?;
    let (h, h_kv, d) = (9, 3, 64);
    let vals = |n: usize, s: f32| -> Vec<f32> {
        (0..n)
            .map(|i| half::f16::from_f32(((i as f32) * s).sin() * 0.5).to_f32())
            .collect()
    };
    for t in [64usize, 256, 1024] {
        let q = Tensor::new(vals(h * d, 0.37), &[1, h, 1, d])?; // (b, h, 1, d)
        let k = Tensor::new(vals(h_kv * t * d, 0.11), &[1, h_kv, t, d])?; // (b, h_kv, t, d)
        let v = Tensor::new(vals(h_kv * t * d, 0.23), &[1, h_kv, t, d])?; // (b, h_kv, t, d)
        let p = AttentionParams {
            causal: true,
            numerics: lucent::Numerics::RowInvariant,
            softcap: None,
            ..AttentionParams::new(d)
        };
        let reps = 20_000 / t;
        let best = |run: &dyn Fn() -> lucent::Result<()>| -> lucent::Result<f64> {
            let mut best = f64::MAX;
            for _ in 0..7 {
                let t0 = Instant::now();
                for _ in 0..reps {
                    run()?;
                }
                best = best.min(t0.elapsed().as_secs_f64() / reps as f64);
            }
            Ok(best)
        };
        let call = || lucent::ops::attention(&q, &k, &v, &p).map(std::hint::black_box);
        let one = best(&|| rt.install(|| lucent::threads::serial(|| call().map(|_| ()))))?;
        let two = best(&|| rt.install(|| call().map(|_| ())))?;
        for (threads, s) in [(1, one), (2, two)] {
            println!(
                "t_k {t:>5}, {threads} thread(s): {:>7.1} us per call, {:>5.1} ns per key and head",
                s * 1e6,
                s * 1e9 / (t * h) as f64
            );
        }
    }
    let one = lucent::Runtime::builder().threads(1).build()?;
    let rows = one.install(|| {
        lucent::bench::kernels(&lucent::bench::KernelBench {
            only: Some("attention causal".into()),
            ..Default::default()
        })
    })?;
    for r in rows {
        let twin = r.twin_secs.unwrap_or(f64::NAN);
        println!(
            "{} {}: fused {:.1} us, twin {:.1} us, twin / fused {:.2}",
            r.name,
            r.shape,
            r.secs * 1e6,
            twin * 1e6,
            twin / r.secs
        );
    }
    Ok(())
}
