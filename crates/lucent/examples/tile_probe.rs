//! Temporary probe: prefill kernel rate on small (cache-resident) matrices.
use lucent::tensor::quant::{GgmlType, QMatrix};
use std::time::Instant;
fn main() {
    lucent::threads::set_threads(1);
    let args: Vec<String> = std::env::args().collect();
    let rows: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let t: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(128);
    let cols = 640;
    for dt in [
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
    ] {
        let rb = dt.row_bytes(cols).unwrap();
        let mut b: Vec<u8> = (0..rows * rb).map(|i| (i * 7919 % 251) as u8).collect();
        for blk in b.chunks_exact_mut(dt.block_bytes()) {
            blk[0] = 0;
            blk[1] = 0x2c;
            if dt == GgmlType::Q4_1 || dt == GgmlType::Q4_K {
                blk[2] = 0;
                blk[3] = 0x2c;
            }
        }
        let m = QMatrix::from_vec(dt, rows, cols, b).unwrap();
        let x: Vec<f32> = (0..t * cols).map(|i| ((i as f32) * 0.37).sin()).collect();
        let mut best = f64::MAX;
        for _ in 0..30 {
            let w0 = Instant::now();
            for _ in 0..10 {
                std::hint::black_box(m.matmul_t_quantized(&x, t).unwrap());
            }
            best = best.min(w0.elapsed().as_secs_f64() / 10.0);
        }
        // activation quantisation alone
        let mut bq = f64::MAX;
        for _ in 0..30 {
            let w0 = Instant::now();
            for r in x.chunks_exact(cols) {
                std::hint::black_box(m.prepare(r).unwrap());
            }
            bq = bq.min(w0.elapsed().as_secs_f64());
        }
        println!(
            "{dt:?} {rows}x{cols} t={t}: {:.1} us, {:.1} GMAC/s (quantise acts {:.1} us)",
            best * 1e6,
            (rows * cols * t) as f64 / best / 1e9,
            bq * 1e6
        );
    }
}
