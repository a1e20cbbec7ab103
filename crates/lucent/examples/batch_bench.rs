//! Cost of a continuous-batching decode step: `DecoderModel::decode_batch` over n
//! sequences against n lone decode steps, on one thread, in thread CPU time (so the
//! figures hold on a busy machine), alternating the two forms round after round.
//!
//! `cargo run --release -p lucent --example batch_bench -- [MODEL] [CONTEXT] [N]`
//!
//! MODEL is a known name or a .gguf (default smollm2); every sequence has CONTEXT
//! cached positions (default 128). Prints, per n, the median time of one batched step,
//! of n lone steps, their ratio, and the tokens per CPU-second each gives. With N, only
//! runs 20 batched steps of N sequences (for a profiler).

use std::time::Instant;

use lucent::nn::KvCache;
use lucent::pipeline::generate::TextModel;

/// CPU time of the calling thread in seconds (Linux), wall time elsewhere.
fn cpu_now() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or_else(|| START.with(|t| t.elapsed().as_secs_f64()), |ns| ns * 1e-9)
}

thread_local! {
    static START: Instant = Instant::now();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> lucent::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = args.first().map_or("smollm2", String::as_str);
    let context: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(128);
    lucent::set_threads(1)?;
    let tm: std::sync::Arc<TextModel> = lucent::open(spec)?.text_model()?;
    let ids: Vec<u32> = (0..context as u32).map(|i| 100 + i % 500).collect();
    // One prefilled cache per sequence (16 at most), copied for each round.
    let mut base = tm.new_cache(context + 64);
    tm.model.forward(&ids, Some(&mut base), true, None)?;
    if let Some(n) = args.get(2).and_then(|s| s.parse::<usize>().ok()) {
        // Profiling aid: batched steps of n sequences only, 20 of them.
        for _ in 0..20 {
            let mut caches: Vec<KvCache> = (0..n).map(|_| base.clone()).collect();
            let toks: Vec<u32> = (0..n as u32).map(|i| 200 + i).collect();
            let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
            tm.model.decode_batch(&toks, &mut refs, &mut [])?;
        }
        return Ok(());
    }
    println!("{spec}: {context} cached positions per sequence, 1 thread, CPU time per step (median of 7 rounds)");
    println!(
        "{:>3} {:>12} {:>14} {:>8} {:>12} {:>12}",
        "n", "batched ms", "n lone ms", "ratio", "batch tok/s", "lone tok/s"
    );
    for n in [1usize, 2, 4, 8, 16] {
        let (mut batched, mut lone) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            let mut caches: Vec<KvCache> = (0..n).map(|_| base.clone()).collect();
            let toks: Vec<u32> = (0..n as u32).map(|i| 200 + i).collect();
            let t0 = cpu_now();
            {
                let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
                tm.model.decode_batch(&toks, &mut refs, &mut [])?;
            }
            batched.push(cpu_now() - t0);
            let mut caches: Vec<KvCache> = (0..n).map(|_| base.clone()).collect();
            let t0 = cpu_now();
            for (c, &t) in caches.iter_mut().zip(&toks) {
                tm.model.forward(&[t], Some(c), true, None)?;
            }
            lone.push(cpu_now() - t0);
        }
        let (b, l) = (median(batched), median(lone));
        println!(
            "{n:>3} {:>12.2} {:>14.2} {:>8.2} {:>12.1} {:>12.1}",
            b * 1e3,
            l * 1e3,
            l / b,
            n as f64 / b,
            n as f64 / l
        );
    }
    Ok(())
}
