//! Speed of the quantised matrix-vector product (decode) and the dequantise-then-GEMM
//! product (prefill) on a real GGUF file's weights.
//!
//! `cargo run --release -p lucent --example quant_bench -- FILE.gguf [THREADS]`
//!
//! Prints, per weight matrix of layer 0 and for the token embedding, the time of one
//! `matvec` and its rate in GFLOP/s and GB/s of weights read; then the time to stream
//! every 2-D weight of the file once (what one decoded token costs in matrix products),
//! a plain read of the same bytes (the memory's ceiling for it), and a 128-token
//! prefill through `matmul_t`. The file's bytes are held as a model's are
//! (`GgufFile::into_held`: huge pages where it can); `MAPPED=1` reads them through the
//! file's map instead, for comparison. `USE_ORDER=1` streams the matrices in the order
//! a decoded token uses them (each layer's Q, K, V, output, gate, up, down; then the
//! rest) instead of the file's.

use std::time::Instant;

use lucent::io::gguf::GgufFile;

/// Seconds of `f` in wall time (the best of several runs skips the moments another
/// process had the CPU; this VM's thread CPU clock advances in whole scheduler ticks).
fn time(mut f: impl FnMut() -> lucent::Result<()>) -> lucent::Result<f64> {
    let w0 = Instant::now();
    f()?;
    Ok(w0.elapsed().as_secs_f64())
}

/// Every byte of the matrices read once (summed as u64 words, eight at a time), split
/// over the threads by matrix, as the decode products are.
fn read_all(mats: &[&lucent::ops::quant::QMatrix], threads: usize) -> u64 {
    use rayon::prelude::*;
    let sum = |m: &&lucent::ops::quant::QMatrix| {
        let mut acc = [0u64; 8];
        for c in m.bytes().chunks_exact(64) {
            for (a, w) in acc.iter_mut().zip(c.chunks_exact(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(w);
                *a = a.wrapping_add(u64::from_le_bytes(b));
            }
        }
        acc.iter().fold(0u64, |s, &a| s.wrapping_add(a))
    };
    if threads > 1 {
        mats.par_iter().map(sum).reduce(|| 0, u64::wrapping_add)
    } else {
        mats.iter().map(sum).fold(0, u64::wrapping_add)
    }
}

fn main() -> lucent::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or_else(|| lucent::Error::Argument("usage: quant_bench FILE.gguf [THREADS]".into()))?;
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    lucent::set_threads(threads)?;
    // MAPPED=1: the file's pages, as before models were held (see the module doc).
    let f = if std::env::var_os("MAPPED").is_some() {
        GgufFile::open(path)?
    } else {
        GgufFile::open(path)?.into_held()?
    };
    println!(
        "{} ({} threads: wall time; instruction set {})",
        path,
        threads,
        lucent::runtime::isa()
    );
    let mats: Vec<_> = f
        .tensor_infos()
        .iter()
        .filter(|t| t.shape.len() == 2)
        .map(|t| (t.name.clone(), f.qmatrix(&t.name)))
        .collect::<Vec<_>>();
    for (name, m) in &mats {
        if !(name.starts_with("blk.0.") || name == "token_embd.weight") {
            continue;
        }
        let m = m
            .as_ref()
            .map_err(|e| lucent::Error::Argument(e.to_string()))?;
        let x: Vec<f32> = (0..m.cols()).map(|i| (i as f32 * 0.37).sin()).collect();
        // Enough calls per measurement (about a billion weights) for a steady figure.
        let reps = (1e9 / (m.rows() * m.cols()) as f64).ceil() as usize;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let dt = time(|| {
                for _ in 0..reps {
                    std::hint::black_box(m.matvec(&x)?);
                }
                Ok(())
            })? / reps as f64;
            best = best.min(dt);
        }
        let flops = 2.0 * m.rows() as f64 * m.cols() as f64;
        println!(
            "{name:<28} {:<5} {:>6} x {:<5} {:>8.1} us  {:>6.1} GFLOP/s  {:>6.1} GB/s",
            m.dtype().name(),
            m.rows(),
            m.cols(),
            best * 1e6,
            flops / best / 1e9,
            m.bytes().len() as f64 / best / 1e9
        );
    }
    // One decoded token: every 2-D weight once (the output head is token_embd when tied).
    let mut named: Vec<_> = mats
        .iter()
        .filter_map(|(n, m)| Some((n.clone(), m.as_ref().ok()?)))
        .collect();
    if std::env::var_os("USE_ORDER").is_some() {
        let rank = |n: &str| -> (usize, usize) {
            let layer = n
                .strip_prefix("blk.")
                .and_then(|r| r.split('.').next())
                .and_then(|l| l.parse().ok())
                .unwrap_or(usize::MAX);
            let kinds = [
                "attn_q.",
                "attn_k.",
                "attn_v.",
                "attn_output",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            ];
            (layer, kinds.iter().position(|k| n.contains(k)).unwrap_or(9))
        };
        named.sort_by_key(|(n, _)| rank(n));
    }
    let all: Vec<_> = named.iter().map(|(_, m)| *m).collect();
    let xs: Vec<Vec<f32>> = all
        .iter()
        .map(|m| (0..m.cols()).map(|i| (i as f32 * 0.1).cos()).collect())
        .collect();
    let bytes: usize = all.iter().map(|m| m.bytes().len()).sum();
    // Ten passes per measurement, the best of five.
    let passes = 10;
    let mut best = f64::MAX;
    for _ in 0..5 {
        // With threads, on a pool thread, as the model's forward pass runs: its products
        // then split between that thread and the others without waking the pool from
        // outside.
        let pass = || -> lucent::Result<()> {
            for _ in 0..passes {
                for (m, x) in all.iter().zip(&xs) {
                    std::hint::black_box(m.matvec(x)?);
                }
            }
            Ok(())
        };
        let dt = time(|| {
            if threads > 1 {
                rayon::scope(|_| pass())
            } else {
                pass()
            }
        })? / passes as f64;
        best = best.min(dt);
    }
    println!(
        "all {} matrices once ({:.1} MB): {:.2} ms = {:.0} tok/s bound from matvecs, {:.1} GB/s",
        all.len(),
        bytes as f64 / 1e6,
        best * 1e3,
        1.0 / best,
        bytes as f64 / best / 1e9
    );
    // The same bytes read plainly, in the same order, on the same threads: the memory's
    // ceiling for one decoded token (what streaming the weights could reach at best).
    let mut best_read = f64::MAX;
    for _ in 0..5 {
        let dt = time(|| {
            for _ in 0..passes {
                std::hint::black_box(read_all(&all, threads));
            }
            Ok(())
        })? / passes as f64;
        best_read = best_read.min(dt);
    }
    println!(
        "  plain read of the same {:.1} MB: {:.2} ms = {:.0} tok/s memory ceiling, {:.1} GB/s",
        bytes as f64 / 1e6,
        best_read * 1e3,
        1.0 / best_read,
        bytes as f64 / best_read / 1e9
    );
    // Prefill of 128 tokens through dequantised tiles + GEMM (layer 0 only, scaled).
    let t_len = 128;
    let layer0: Vec<_> = mats
        .iter()
        .filter(|(n, _)| n.starts_with("blk.0."))
        .filter_map(|(_, m)| m.as_ref().ok())
        .collect();
    let n_layers = mats
        .iter()
        .filter(|(n, _)| n.ends_with("attn_q.weight"))
        .count()
        .max(1);
    let xs: Vec<Vec<f32>> = layer0
        .iter()
        .map(|m| {
            (0..t_len * m.cols())
                .map(|i| (i as f32 * 0.01).sin())
                .collect()
        })
        .collect();
    let per_layer = time(|| {
        for (m, x) in layer0.iter().zip(&xs) {
            std::hint::black_box(m.matmul_t(x, t_len)?);
        }
        Ok(())
    })?;
    println!(
        "prefill {t_len} tokens, layer 0 matrices: {:.2} ms; x {n_layers} layers = {:.0} tok/s bound from matmuls (no head)",
        per_layer * 1e3,
        t_len as f64 / (per_layer * n_layers as f64)
    );
    // The same through the quantised kernels (what a GGUF model's prefill runs), per
    // matrix: best of 5.
    let mut total = 0.0;
    for (m, x) in layer0.iter().zip(&xs) {
        let mut best = f64::MAX;
        for _ in 0..15 {
            let reps = 4;
            // The best of many runs is what the kernel costs when nothing else runs.
            let w0 = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(m.matmul_t_quantized(x, t_len, lucent::Numerics::LlamaCpp)?);
            }
            best = best.min(w0.elapsed().as_secs_f64() / reps as f64);
        }
        total += best;
        println!(
            "  quantised {:<5} {:>6} x {:<5} {:>8.1} us  {:>6.1} GMAC/s",
            m.dtype().name(),
            m.rows(),
            m.cols(),
            best * 1e6,
            (t_len * m.rows() * m.cols()) as f64 / best / 1e9
        );
    }
    println!(
        "prefill {t_len} tokens through the quantised kernels, layer 0: {:.2} ms; x {n_layers} layers = {:.0} tok/s bound",
        total * 1e3,
        t_len as f64 / (total * n_layers as f64)
    );
    Ok(())
}
