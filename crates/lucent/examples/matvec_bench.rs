//! Speed of one decoded token's matrix-vector product kernel alone, on synthetic
//! quantised matrices of two sizes: one that stays in L2 (the kernel's arithmetic
//! rate) and one of 64 MB that streams from memory (what decode meets).
//!
//! `cargo run --release -p lucent --example matvec_bench [-- TYPE ...]`
//!
//! Prints, per type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; default Q4_1 Q8_0 Q5_0), the
//! GB/s of weights read and the multiply-adds per second on one thread: the best
//! of 40 short runs in wall time (so a moment when another process had the CPU
//! does not count). `SHAPES=1536x576,768x1536` measures those shapes instead. The
//! matrices are held as a model's weights are (`lucent::io::resident`).

use lucent::ops::quant::QMatrix;
use lucent::tensor::quant::{GgmlType, QBytes};

/// Seconds since an arbitrary start (wall time: a short run's best of many skips the
/// moments another process had the CPU; the thread CPU clock ticks too coarsely).
fn now() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// A matrix of `rows` × `cols` numbers of `dtype` with valid random-looking blocks
/// (f16 scales of modest size, random quants).
fn synthetic(dtype: GgmlType, rows: usize, cols: usize) -> lucent::Result<QMatrix> {
    let row_bytes = dtype.row_bytes(cols)?;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut bytes: Vec<u8> = (0..rows * row_bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    // Every f16 in the file's scale positions made finite and small: 0x2c00 ≈ 0.0625.
    let bb = dtype.block_bytes();
    let (d_at, m_at): (usize, Option<usize>) = match dtype {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => (0, None),
        GgmlType::Q4_1 | GgmlType::Q5_1 => (0, Some(2)),
        _ => {
            return Err(lucent::Error::Argument(format!(
                "matvec_bench: no synthetic blocks for {}",
                dtype.name()
            )))
        }
    };
    for b in bytes.chunks_exact_mut(bb) {
        b[d_at..d_at + 2].copy_from_slice(&0x2c00u16.to_le_bytes());
        if let Some(m) = m_at {
            b[m..m + 2].copy_from_slice(&0xac00u16.to_le_bytes());
        }
    }
    // Held as a model's weights are (lucent::io::resident: huge pages where it can).
    let held = lucent::io::resident::copy_held(&bytes, std::path::Path::new("synthetic"))?;
    let len = held.len();
    let bytes = QBytes::Mapped {
        map: std::sync::Arc::new(held),
        start: 0,
        len,
    };
    QMatrix::new(dtype, rows, cols, bytes)
}

fn main() -> lucent::Result<()> {
    lucent::set_threads(1)?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kinds: Vec<GgmlType> = if args.is_empty() {
        vec![GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q5_0]
    } else {
        args.iter()
            .map(|a| {
                [
                    GgmlType::Q4_0,
                    GgmlType::Q4_1,
                    GgmlType::Q5_0,
                    GgmlType::Q5_1,
                    GgmlType::Q8_0,
                ]
                .into_iter()
                .find(|k| k.name().eq_ignore_ascii_case(a))
                .ok_or_else(|| lucent::Error::Argument(format!("unknown type {a}")))
            })
            .collect::<lucent::Result<_>>()?
    };
    for dtype in kinds {
        let shapes: Vec<(&str, usize, usize)> = match std::env::var("SHAPES") {
            Ok(v) => v
                .split(',')
                .filter_map(|c| c.split_once('x'))
                .filter_map(|(r, c)| Some(("L2 ", r.parse().ok()?, c.parse().ok()?)))
                .collect(),
            Err(_) => vec![("L2 ", 1536, 576), ("mem", 0, 576), ("L2 ", 2048, 640)],
        };
        for (label, rows, cols) in shapes {
            let rows = if rows == 0 {
                (64 << 20) / dtype.row_bytes(cols)?
            } else {
                rows
            };
            let m = synthetic(dtype, rows, cols)?;
            let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
            let a = m.prepare(&x)?;
            let mut y = vec![0.0f32; rows];
            let bytes = m.bytes().len() as f64;
            let reps = ((32 << 20) as f64 / bytes).ceil() as usize;
            let mut best = f64::MAX;
            for _ in 0..40 {
                let t0 = now();
                for _ in 0..reps {
                    m.matvec_prepared(&a, &mut y)?;
                    std::hint::black_box(&mut y);
                }
                best = best.min((now() - t0) / reps as f64);
            }
            println!(
                "{:<5} {label} {rows:>6} x {cols:<4} {:>9.1} us {:>6.1} GB/s {:>6.1} GMAC/s",
                dtype.name(),
                best * 1e6,
                bytes / best / 1e9,
                (rows * cols) as f64 / best / 1e9
            );
        }
    }
    Ok(())
}
