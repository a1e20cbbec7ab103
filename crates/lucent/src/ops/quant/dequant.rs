//! Dequantisation: quantised blocks widened to the f32 numbers they stand for, by each
//! format's definition (`crate::tensor::quant`), bit for bit: every value is computed in
//! f32 as the formula says, in that order.

use half::{bf16, f16};

use crate::tensor::quant::{
    blocks, f16_value, k_scale_min, q3_k_scales, Block, BlockIQ4_NL, BlockIQ4_XS, BlockQ2_K,
    BlockQ3_K, BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K,
    BlockQ8_0, GgmlType, KVALUES_IQ4NL,
};
use crate::{Error, Result};

/// Widen `bytes` (whole blocks of `dtype`) to `out.len()` f32 values, by the format's
/// definition. Errors if the byte count does not match.
pub(crate) fn dequantize(dtype: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let need = dtype.row_bytes(out.len())?;
    if bytes.len() != need {
        return Err(Error::Shape(format!(
            "dequantize {dtype}: {} numbers need {need} bytes, got {}",
            out.len(),
            bytes.len()
        )));
    }
    match dtype {
        GgmlType::F32 => {
            for (y, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *y = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (y, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (y, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        GgmlType::Q4_0 => each::<BlockQ4_0>(bytes, out, q4_0),
        GgmlType::Q4_1 => each::<BlockQ4_1>(bytes, out, q4_1),
        GgmlType::Q5_0 => each::<BlockQ5_0>(bytes, out, q5_0),
        GgmlType::Q5_1 => each::<BlockQ5_1>(bytes, out, q5_1),
        GgmlType::Q8_0 => each::<BlockQ8_0>(bytes, out, q8_0),
        GgmlType::Q4_K => each::<BlockQ4_K>(bytes, out, |b, y| {
            k45(f16_value(b.d), f16_value(b.dmin), &b.scales, &b.qs, None, y)
        }),
        GgmlType::Q5_K => each::<BlockQ5_K>(bytes, out, |b, y| {
            k45(
                f16_value(b.d),
                f16_value(b.dmin),
                &b.scales,
                &b.qs,
                Some(&b.qh),
                y,
            )
        }),
        GgmlType::Q6_K => each::<BlockQ6_K>(bytes, out, q6_k),
        GgmlType::Q2_K => each::<BlockQ2_K>(bytes, out, q2_k),
        GgmlType::Q3_K => each::<BlockQ3_K>(bytes, out, q3_k),
        GgmlType::IQ4_NL => each::<BlockIQ4_NL>(bytes, out, iq4_nl),
        GgmlType::IQ4_XS => each::<BlockIQ4_XS>(bytes, out, iq4_xs),
    }
    Ok(())
}

/// `block(b, y)` for every block `b` of `bytes` and its `B::TYPE.block_len()` numbers of
/// `out`.
fn each<B: Block>(bytes: &[u8], out: &mut [f32], block: impl Fn(&B, &mut [f32])) {
    let bl = B::TYPE.block_len();
    for (b, y) in blocks::<B>(bytes).iter().zip(out.chunks_exact_mut(bl)) {
        block(b, y);
    }
}

/// `x = d (q − 8)`.
fn q4_0(b: &BlockQ4_0, y: &mut [f32]) {
    let d = f16_value(b.d);
    let qs = &b.qs;
    for j in 0..16 {
        y[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
        y[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
    }
}

/// `x = d q + m`.
fn q4_1(b: &BlockQ4_1, y: &mut [f32]) {
    let (d, m) = (f16_value(b.d), f16_value(b.m));
    let qs = &b.qs;
    for j in 0..16 {
        y[j] = d * (qs[j] & 0x0F) as f32 + m;
        y[j + 16] = d * (qs[j] >> 4) as f32 + m;
    }
}

/// `x = d (q − 16)`, q with its fifth bit.
fn q5_0(b: &BlockQ5_0, y: &mut [f32]) {
    let d = f16_value(b.d);
    let qh = b.high_bits();
    let qs = &b.qs;
    for j in 0..16 {
        let h0 = (((qh >> j) & 1) << 4) as i32;
        let h1 = (((qh >> (j + 16)) & 1) << 4) as i32;
        y[j] = d * (((qs[j] & 0x0F) as i32 | h0) - 16) as f32;
        y[j + 16] = d * (((qs[j] >> 4) as i32 | h1) - 16) as f32;
    }
}

/// `x = d q + m`, q with its fifth bit.
fn q5_1(b: &BlockQ5_1, y: &mut [f32]) {
    let (d, m) = (f16_value(b.d), f16_value(b.m));
    let qh = b.high_bits();
    let qs = &b.qs;
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * ((qs[j] & 0x0F) as u32 | h0) as f32 + m;
        y[j + 16] = d * ((qs[j] >> 4) as u32 | h1) as f32 + m;
    }
}

/// `x = d q`.
fn q8_0(b: &BlockQ8_0, y: &mut [f32]) {
    let d = f16_value(b.d);
    for (y, &q) in y.iter_mut().zip(&b.qs) {
        *y = d * q as f32;
    }
}

/// Q4_K (`qh` None) and Q5_K: `x = d · sc_j · q − dmin · mn_j`. Sub-block j (32
/// numbers) is the low nibbles (j even) or high nibbles (j odd) of bytes
/// 32·(j/2) .. 32·(j/2)+32; Q5_K's fifth bit is bit j of qh[l].
fn k45(d: f32, dmin: f32, scales: &[u8; 12], qs: &[u8; 128], qh: Option<&[u8; 32]>, y: &mut [f32]) {
    for j in 0..8 {
        let (sc, mn) = k_scale_min(j, scales);
        let dl = d * sc as f32;
        let ml = dmin * mn as f32;
        let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
        for l in 0..32 {
            let mut q = if j % 2 == 0 {
                chunk[l] & 0x0F
            } else {
                chunk[l] >> 4
            };
            if let Some(qh) = qh {
                q |= ((qh[l] >> j) & 1) << 4;
            }
            y[32 * j + l] = dl * q as f32 - ml;
        }
    }
}

/// `x = d · sc_g · (q − 32)` (the layout: [`BlockQ6_K`]).
fn q6_k(b: &BlockQ6_K, y: &mut [f32]) {
    let (ql, qh, sc) = (&b.ql, &b.qh, &b.scales);
    let d = f16_value(b.d);
    for n in 0..2 {
        for k in 0..4 {
            for l in 0..32 {
                let lb = ql[64 * n + 32 * (k % 2) + l];
                let lo = if k < 2 { lb & 0x0F } else { lb >> 4 };
                let hi = (qh[32 * n + l] >> (2 * k)) & 3;
                let q = (lo | (hi << 4)) as i32 - 32;
                let i = 128 * n + 32 * k + l;
                y[i] = d * sc[i / 16] as f32 * q as f32;
            }
        }
    }
}

/// `x = dl · q − ml` with `dl = d · sc_g`, `ml = dmin · mn_g` (the layout: [`BlockQ2_K`]).
fn q2_k(b: &BlockQ2_K, y: &mut [f32]) {
    let (d, dmin) = (f16_value(b.d), f16_value(b.dmin));
    for (i, y) in y.iter_mut().enumerate() {
        let (n, k, l) = (i / 128, (i % 128) / 32, i % 32);
        let q = (b.qs[32 * n + l] >> (2 * k)) & 3;
        let sc = b.scales[i / 16];
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *y = dl * q as f32 - ml;
    }
}

/// `x = dl · (q − 4)` with `dl = d · (sc_g − 32)` (the layout: [`BlockQ3_K`]).
fn q3_k(b: &BlockQ3_K, y: &mut [f32]) {
    let d = f16_value(b.d);
    let sc = q3_k_scales(&b.scales);
    for (i, y) in y.iter_mut().enumerate() {
        let (n, k, l) = (i / 128, (i % 128) / 32, i % 32);
        let low = ((b.qs[32 * n + l] >> (2 * k)) & 3) as i32;
        let high = ((b.hmask[l] >> (4 * n + k)) & 1) as i32;
        let dl = d * sc[i / 16] as f32;
        *y = dl * (low - 4 * (1 - high)) as f32;
    }
}

/// The 32 grid indices of a 32-number run (low nibbles first), as [`BlockIQ4_NL`] lays them.
pub(crate) fn iq4_indices(qs: &[u8]) -> [u8; 32] {
    std::array::from_fn(|j| {
        if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        }
    })
}

/// `x = d · K[q]`.
fn iq4_nl(b: &BlockIQ4_NL, y: &mut [f32]) {
    let d = f16_value(b.d);
    for (y, q) in y.iter_mut().zip(iq4_indices(&b.qs)) {
        *y = d * KVALUES_IQ4NL[q as usize] as f32;
    }
}

/// `x = dl · K[q]` with `dl = d · (sc_j − 32)`.
fn iq4_xs(b: &BlockIQ4_XS, y: &mut [f32]) {
    let d = f16_value(b.d);
    let sc = b.sub_scales();
    for (j, y) in y.chunks_exact_mut(32).enumerate() {
        let dl = d * sc[j] as f32;
        for (y, q) in y.iter_mut().zip(iq4_indices(&b.qs[16 * j..16 * j + 16])) {
            *y = dl * KVALUES_IQ4NL[q as usize] as f32;
        }
    }
}
