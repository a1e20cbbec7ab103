//! Quantised block types of GGUF files (ggml's formats), their dequantisation, and dot
//! products of a quantised weight row with an activation row quantised on the fly.
//!
//! A quantised row of `n` numbers is `n / B` blocks of `B` numbers. Each block stores
//! small integers `q` and one or two f16 numbers; the value it stands for is
//!
//! - `Q4_0`, `Q5_0`, `Q8_0` (B = 32): `x = d · (q − o)` with o = 8, 16, 0,
//! - `Q4_1`, `Q5_1` (B = 32):          `x = d · q + m`,
//! - `Q4_K`, `Q5_K` (B = 256, eight sub-blocks of 32 with 6-bit scale `sc` and min `mn`):
//!   `x = d · sc_j · q − dmin · mn_j`,
//! - `Q6_K` (B = 256, sixteen groups of 16 with an i8 scale): `x = d · sc_g · (q − 32)`.
//!
//! [`dequantize`] is the plain definition, bit for bit (every value is computed in f32 as
//! the formula above, in that order). The dot product `w · x` of a weight row with an
//! f32 activation row first quantises `x` to 8 bits per value ([`quantize_activations`]):
//! `Q8_0`-style blocks of 32 (`x ≈ dx · qx`, `dx = max|x| / 127` kept in f16) against the 32-blocks,
//! `Q8_K`-style blocks of 256 (one f32 scale plus the sum of every 16 `qx`) against the
//! K-quants, as llama.cpp does. Then the inner sums are exact integer arithmetic:
//!
//! `w · x ≈ Σ_blocks d · dx · Σ_i (q_i − o) · qx_i` (+ `m · dx · Σ qx_i` for the `_1` kinds,
//! − `dmin · dx · Σ_j mn_j · Σ_{i∈j} qx_i` for Q4_K/Q5_K, using the stored 16-sums).
//!
//! So the quantised dot equals `dequantize(w) · dequantize(qx)` up to f32 rounding, and
//! differs from `dequantize(w) · x` by at most `Σ_i |w_i| · dx(i) / 2` (each activation is
//! rounded to the nearest multiple of its block's `dx`).
//!
//! The f32 steps around those integer sums follow llama.cpp's CPU kernels (AVX2 build)
//! order for order, so a GGUF model gives llama.cpp's numbers to the bit: the 32-block
//! dots' eight lanes, and for the K-quants the order of whichever kernel llama.cpp would
//! run for that product (`KOrder`: its dot, its repacked Q4_K kernels, its tiled
//! product for prompts of 8 rows or more).
//!
//! Every dot has a scalar twin in [`reference`](mod@reference), in the same order; the
//! fast path uses AVX-512 VNNI or else AVX2 + FMA when the CPU has them (checked at run
//! time), equal to the twin bit for bit, and is the twin otherwise. [`QMatrix`] is a
//! rows × cols weight matrix in one of these types, with a decode path (`matvec`, streaming
//! the quantised weights once) and a prefill path (`matmul_t`, dequantised tiles through
//! the f32 GEMM).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use half::{bf16, f16};

use crate::{Error, Result};

/// Numbers per block of the 32-blocks (`Q4_0` ... `Q8_0`).
pub const QK: usize = 32;
/// Numbers per block of the K-quants (`Q4_K`, `Q5_K`, `Q6_K`) and of `Q8_K` activations.
pub const QK_K: usize = 256;

/// A storage type of GGUF tensors that lucent reads. The discriminants are ggml's ids.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// IEEE f32.
    F32,
    /// IEEE f16.
    F16,
    /// bfloat16.
    BF16,
    /// 32-blocks: f16 `d`, 16 bytes of 4-bit `q`; `x = d (q − 8)`. 18 bytes.
    Q4_0,
    /// 32-blocks: f16 `d`, f16 `m`, 16 bytes of 4-bit `q`; `x = d q + m`. 20 bytes.
    Q4_1,
    /// 32-blocks: f16 `d`, 32 high bits, 16 bytes of low nibbles; `x = d (q − 16)`. 22 bytes.
    Q5_0,
    /// 32-blocks: f16 `d`, f16 `m`, 32 high bits, 16 bytes of low nibbles; `x = d q + m`. 24 bytes.
    Q5_1,
    /// 32-blocks: f16 `d`, 32 i8 `q`; `x = d q`. 34 bytes.
    Q8_0,
    /// 256-blocks: f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles. 144 bytes.
    Q4_K,
    /// 256-blocks: as Q4_K plus 32 bytes of fifth bits. 176 bytes.
    Q5_K,
    /// 256-blocks: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 i8 scales, f16 `d`. 210 bytes.
    Q6_K,
}

impl GgmlType {
    /// Every type lucent reads.
    pub const ALL: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// The type with ggml id `id`, or `None` if lucent does not read it
    /// (see [`ggml_type_name`] for a name to put in the error).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// ggml's numeric id of this type (as stored in GGUF tensor tables).
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::BF16 => 30,
        }
    }

    /// ggml's name of the type (`"Q4_K"`).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
        }
    }

    /// Numbers per block (1 for the float types).
    pub fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                QK
            }
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
        }
    }

    /// Bytes of a row of `n` numbers; errors if `n` is not a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Result<usize> {
        let b = self.block_len();
        if !n.is_multiple_of(b) {
            return Err(Error::Shape(format!(
                "a {} row holds whole blocks of {b} numbers, but this row has {n}; \
                 the tensor's innermost dimension must be a multiple of {b}",
                self.name()
            )));
        }
        (n / b).checked_mul(self.block_bytes()).ok_or_else(|| {
            Error::Shape(format!("a {} row of {n} numbers is too large", self.name()))
        })
    }

    /// How activations are quantised for a dot product with a row of this type.
    pub fn activation_kind(self) -> ActKind {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => ActKind::F32,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                ActKind::Q8_0
            }
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => ActKind::Q8_K,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// ggml's name for a type id, including types lucent does not read (for error messages).
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    if let Some(t) = GgmlType::from_id(id) {
        return Some(t.name());
    }
    Some(match id {
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

// ------------------------------------------------------------------ byte helpers

#[inline]
fn f16_at(b: &[u8], o: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32()
}

#[inline]
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block, unpacked from
/// its 12 scale bytes: sub-blocks 0–3 keep their low 6 bits in bytes j (scale) and j+4
/// (min); sub-blocks 4–7 keep their low 4 bits in byte j+4 (scale: low nibble, min: high
/// nibble) and their top 2 bits in the top 2 bits of bytes j−4 (scale) and j (min).
#[inline]
pub fn k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// All eight 6-bit scales and minimums of a Q4_K/Q5_K block at once ([`k_scale_min`]
/// for j = 0..8), with word-wide bit operations on its 12 scale bytes read as three
/// little-endian u32 (a, b, c): scales 0–3 are the low 6 bits of a's bytes, mins 0–3
/// those of b's; scales 4–7 take c's low nibbles with a's top 2 bits above them, mins
/// 4–7 c's high nibbles with b's top 2 bits.
#[inline]
pub fn k_scales_mins(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let (a, b, c) = (u32_at(s, 0), u32_at(s, 4), u32_at(s, 8));
    let sc_hi = (c & LOW4) | (((a >> 6) & LOW2) << 4);
    let mn_hi = ((c >> 4) & LOW4) | (((b >> 6) & LOW2) << 4);
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    sc[..4].copy_from_slice(&(a & LOW6).to_le_bytes());
    sc[4..].copy_from_slice(&sc_hi.to_le_bytes());
    mn[..4].copy_from_slice(&(b & LOW6).to_le_bytes());
    mn[4..].copy_from_slice(&mn_hi.to_le_bytes());
    (sc, mn)
}

// ------------------------------------------------------------------ dequantisation

/// Widen `bytes` (whole blocks of `dtype`) to `out.len()` f32 values, by the format's
/// definition (see the module doc). Errors if the byte count does not match.
pub fn dequantize(dtype: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let need = dtype.row_bytes(out.len())?;
    if bytes.len() != need {
        return Err(Error::Shape(format!(
            "dequantize {dtype}: {} numbers need {need} bytes, got {}",
            out.len(),
            bytes.len()
        )));
    }
    let bb = dtype.block_bytes();
    let bl = dtype.block_len();
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
        _ => {
            for (b, y) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bl)) {
                dequantize_block(dtype, b, y);
            }
        }
    }
    Ok(())
}

/// One block of a quantised type to f32 (`b.len() == block_bytes`, `y.len() == block_len`).
fn dequantize_block(dtype: GgmlType, b: &[u8], y: &mut [f32]) {
    match dtype {
        GgmlType::Q4_0 => {
            let d = f16_at(b, 0);
            let qs = &b[2..18];
            for j in 0..16 {
                y[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
                y[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
            }
        }
        GgmlType::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let qs = &b[4..20];
            for j in 0..16 {
                y[j] = d * (qs[j] & 0x0F) as f32 + m;
                y[j + 16] = d * (qs[j] >> 4) as f32 + m;
            }
        }
        GgmlType::Q5_0 => {
            let d = f16_at(b, 0);
            let qh = u32_at(b, 2);
            let qs = &b[6..22];
            for j in 0..16 {
                let h0 = (((qh >> j) & 1) << 4) as i32;
                let h1 = (((qh >> (j + 16)) & 1) << 4) as i32;
                y[j] = d * (((qs[j] & 0x0F) as i32 | h0) - 16) as f32;
                y[j + 16] = d * (((qs[j] >> 4) as i32 | h1) - 16) as f32;
            }
        }
        GgmlType::Q5_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let qh = u32_at(b, 4);
            let qs = &b[8..24];
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) << 4;
                let h1 = ((qh >> (j + 16)) & 1) << 4;
                y[j] = d * ((qs[j] & 0x0F) as u32 | h0) as f32 + m;
                y[j + 16] = d * ((qs[j] >> 4) as u32 | h1) as f32 + m;
            }
        }
        GgmlType::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                y[j] = d * (b[2 + j] as i8) as f32;
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let scales = &b[4..16];
            let (qh, qs): (&[u8], &[u8]) = if dtype == GgmlType::Q5_K {
                (&b[16..48], &b[48..176])
            } else {
                (&[], &b[16..144])
            };
            // Sub-block j (32 numbers) is the low nibbles (j even) or high nibbles (j odd)
            // of bytes 32·(j/2) .. 32·(j/2)+32; Q5_K's fifth bit is bit j of qh[l].
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
                    if dtype == GgmlType::Q5_K {
                        q |= ((qh[l] >> j) & 1) << 4;
                    }
                    y[32 * j + l] = dl * q as f32 - ml;
                }
            }
        }
        GgmlType::Q6_K => {
            let (ql, qh) = (&b[0..128], &b[128..192]);
            let sc = &b[192..208];
            let d = f16_at(b, 208);
            // Number i = 128·n + 32·k + l (n half, k quarter, l < 32): low 4 bits from
            // ql[64n + 32·(k%2) + l] (low nibble for k < 2, high for k ≥ 2), high 2 bits
            // from bits 2k, 2k+1 of qh[32n + l]; scale sc[i / 16].
            for n in 0..2 {
                for k in 0..4 {
                    for l in 0..32 {
                        let lb = ql[64 * n + 32 * (k % 2) + l];
                        let lo = if k < 2 { lb & 0x0F } else { lb >> 4 };
                        let hi = (qh[32 * n + l] >> (2 * k)) & 3;
                        let q = (lo | (hi << 4)) as i32 - 32;
                        let i = 128 * n + 32 * k + l;
                        y[i] = d * (sc[i / 16] as i8) as f32 * q as f32;
                    }
                }
            }
        }
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            unreachable!("float types are widened in dequantize") // ok: dequantize handles them first
        }
    }
}

// ------------------------------------------------------------------ activations

/// How an activation row is prepared for a dot product with a weight row.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    /// Kept as f32 (float weight types).
    F32,
    /// Blocks of 32: f32 scale `d`, 32 i8, and `d · Σ q` (for the `_1` types' min).
    Q8_0,
    /// Blocks of 256: f32 scale `d`, 256 i8, and the i32 sum of every 16 `q`.
    Q8_K,
}

/// An activation row prepared for dot products ([`quantize_activations`]).
#[derive(Clone, Debug)]
pub struct QuantizedActs {
    /// The preparation.
    pub kind: ActKind,
    /// Numbers in the row.
    pub len: usize,
    /// Per block: the scale `dx` (`x ≈ dx · q`).
    pub d: Vec<f32>,
    /// Per block of 32 (Q8_0 only): `dx · Σ q`, rounded to f16 as llama.cpp stores it.
    pub sum: Vec<f32>,
    /// Per group of 16 (Q8_K only): `Σ q`.
    pub bsums: Vec<i32>,
    /// The 8-bit values, in [−127, 127].
    pub qs: Vec<i8>,
    /// The f32 row itself (ActKind::F32 only).
    pub f32s: Vec<f32>,
}

impl QuantizedActs {
    /// The values these activations stand for (`dx · q`), for tests and bounds.
    pub fn dequantize(&self) -> Vec<f32> {
        match self.kind {
            ActKind::F32 => self.f32s.clone(),
            ActKind::Q8_0 | ActKind::Q8_K => {
                let b = if self.kind == ActKind::Q8_0 { QK } else { QK_K };
                self.qs
                    .iter()
                    .enumerate()
                    .map(|(i, &q)| self.d[i / b] * q as f32)
                    .collect()
            }
        }
    }
}

/// Quantise the activation row `x` for dot products with weights of `dtype`, with
/// llama.cpp's rules to the bit (so the two engines see the same 8-bit activations):
///
/// - 32-blocks (`Q8_0` kind): `q = round(x · 127 / max|x|)` (ties to even), and the
///   scale kept as llama.cpp stores it, `dx = f16(max|x| / 127)`; for the `_1` weight
///   kinds also `s = f16(max|x| / 127 · Σ q)`.
/// - 256-blocks (`Q8_K` kind): with `m` the value of largest magnitude (sign kept),
///   `q = round(x · (−127 / m))` (ties to even) and `dx = 1 / (−127 / m)` in f32.
///
/// An all-zero block has `dx = 0` and `q = 0`. Errors if `x.len()` is not a whole number
/// of blocks.
pub fn quantize_activations(dtype: GgmlType, x: &[f32]) -> Result<QuantizedActs> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return quantize_rows(dtype, x, true);
    }
    quantize_rows(dtype, x, false)
}

/// [`quantize_activations`], block by block with the AVX-512 kernels when `fast` (the
/// caller checked the CPU), else with the scalar twin ([`reference::quantize_activations`]).
fn quantize_rows(dtype: GgmlType, x: &[f32], fast: bool) -> Result<QuantizedActs> {
    let kind = dtype.activation_kind();
    let block = match kind {
        ActKind::F32 => 1,
        ActKind::Q8_0 => QK,
        ActKind::Q8_K => QK_K,
    };
    if !x.len().is_multiple_of(block) {
        return Err(Error::Shape(format!(
            "activations for {dtype} weights come in blocks of {block}; this row has {} numbers",
            x.len()
        )));
    }
    let mut a = QuantizedActs {
        kind,
        len: x.len(),
        d: Vec::new(),
        sum: Vec::new(),
        bsums: Vec::new(),
        qs: Vec::new(),
        f32s: Vec::new(),
    };
    if kind == ActKind::F32 {
        a.f32s = x.to_vec();
        return Ok(a);
    }
    let nb = x.len() / block;
    a.d.reserve(nb);
    a.qs.resize(x.len(), 0);
    for (bi, xb) in x.chunks_exact(block).enumerate() {
        let qb = &mut a.qs[bi * block..(bi + 1) * block];
        #[cfg(target_arch = "x86_64")]
        if fast {
            // SAFETY: `fast` only after avx512::available(); xb and qb hold one block.
            let done = unsafe {
                match kind {
                    ActKind::Q8_0 => avx512::quantize_q8_0(xb, qb, &mut a.d, &mut a.sum),
                    _ => avx512::quantize_q8_k(xb, qb, &mut a.d, &mut a.bsums),
                }
            };
            if done {
                continue;
            }
        }
        match kind {
            ActKind::Q8_0 => {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                for (q, &v) in qb.iter_mut().zip(xb) {
                    *q = round_even(v * id).clamp(-127.0, 127.0) as i8;
                }
                let sq: i32 = qb.iter().map(|&q| q as i32).sum();
                a.d.push(f16::from_f32(d).to_f32());
                a.sum.push(f16::from_f32(d * sq as f32).to_f32());
            }
            ActKind::Q8_K => {
                // The first value of largest magnitude, with its sign.
                let (mut amax, mut max) = (0.0f32, 0.0f32);
                for &v in xb {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                if amax == 0.0 {
                    a.d.push(0.0);
                    a.bsums.extend([0; QK_K / 16]);
                    continue;
                }
                let iscale = -127.0 / max;
                for (q, &v) in qb.iter_mut().zip(xb) {
                    *q = round_even(iscale * v).clamp(-127.0, 127.0) as i8;
                }
                a.d.push(1.0 / iscale);
                for g in qb.chunks_exact(16) {
                    a.bsums.push(g.iter().map(|&q| q as i32).sum());
                }
            }
            ActKind::F32 => {}
        }
    }
    Ok(a)
}

/// `x` rounded to the nearest integer, ties to even, for |x| < 2²²: adding and taking
/// away 1.5·2²³ leaves no fraction bits (ggml's `nearest_int`; inline, where
/// `round_ties_even` is a library call).
#[inline(always)]
fn round_even(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC) - MAGIC
}

// ------------------------------------------------------------------ dot products

fn check_dot(dtype: GgmlType, row: &[u8], a: &QuantizedActs) -> Result<()> {
    if a.kind != dtype.activation_kind() {
        return Err(Error::Argument(format!(
            "activations prepared as {:?} cannot meet {dtype} weights (they need {:?}); \
             quantise them with quantize_activations({dtype}, x)",
            a.kind,
            dtype.activation_kind()
        )));
    }
    let need = dtype.row_bytes(a.len)?;
    if row.len() != need {
        return Err(Error::Shape(format!(
            "{dtype} dot: a row of {} numbers is {need} bytes, got {}",
            a.len,
            row.len()
        )));
    }
    Ok(())
}

/// `w · x` for one weight row of `dtype` and prepared activations, on the fastest path
/// this CPU has (AVX-512 VNNI for the K-quants, AVX2 + FMA, else the
/// [`reference`](mod@reference) twin).
pub fn vec_dot(dtype: GgmlType, row: &[u8], a: &QuantizedActs) -> Result<f32> {
    check_dot(dtype, row, a)?;
    Ok(dot_kernel(dtype)(row, a))
}

/// Whether the AVX2 + FMA (+ F16C) kernels run on this CPU.
pub fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX-512 VNNI tile kernels (the decode path of Q4_0, Q4_1, Q5_0, Q5_1 and
/// Q8_0 matrices) run on this CPU; else Q4_1 and Q8_0 take the AVX2 tile kernel and the
/// others the per-row dots.
pub fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A checked dot kernel: the row and activations already agree in length and kind.
type DotFn = fn(&[u8], &QuantizedActs) -> f32;

/// A dot kernel of one weight row with four activation rows ([`avx512::kernel4`]).
type Dot4Fn = fn(&[u8], [&QuantizedActs; 4]) -> [f32; 4];

/// A tile kernel: dots of `RW` weight rows (with their scale tables) and `RA` prepared
/// activation rows ([`avx2::tile`], [`avx512::tile`]).
#[cfg(target_arch = "x86_64")]
type Tile<const RW: usize, const RA: usize> =
    unsafe fn([&[u8]; RW], [&[f32]; RW], [&QuantizedActs; RA], &mut [[f32; RA]; RW]);

/// The dot kernel for `dtype` on this CPU.
fn dot_kernel(dtype: GgmlType) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return avx512::kernel(dtype);
    }
    #[cfg(target_arch = "x86_64")]
    if simd_available() {
        return avx2::kernel(dtype);
    }
    reference::kernel(dtype)
}

/// Which of llama.cpp's kernels a K-quant dot sums like: its arithmetic differs between
/// them in the f32 steps (the integer parts are exact in all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KOrder {
    /// `ggml_vec_dot_q4_K_q8_K` / `_q5_K_`: eight lanes per block, the minimums apart.
    Dot,
    /// `ggml_gemv_q4_K_8x8_q8_K` (repacked Q4_K, one activation row): one chain, one
    /// step per block.
    Gemv,
    /// `ggml_gemm_q4_K_8x8_q8_K` (repacked Q4_K, activation rows in fours): one chain,
    /// one step per 64 numbers. (Its four-row quantiser gives a block whose largest
    /// magnitude comes with both signs the positive one's scale, where the one-row
    /// quantiser takes the first's: that flips the signs of the block's q and d together,
    /// which no product sees, so lucent quantises all rows alike.)
    Gemm,
    /// llama.cpp's tiled K-quant product (`ggml_compute_forward_mul_mat_tiled`, AVX2),
    /// which it takes for a product of 8 activation rows or more (Q4_K not repacked,
    /// Q5_K, Q6_K): one chain, per block `fma(d·S − dmin·M, dx)` with `S` and `M` the
    /// block's exact integer totals.
    Tiled,
}

/// The number of activation rows from which llama.cpp multiplies a K-quant matrix that
/// it has not repacked with its tiled kernel ([`KOrder::Tiled`]).
const TILED_MIN_ROWS: usize = 8;

/// The kernels of a repacked Q4_K matrix on this CPU: one activation row
/// ([`KOrder::Gemv`]) and four ([`KOrder::Gemm`]).
fn repacked_kernels() -> (DotFn, Dot4Fn) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return avx512::repacked_kernels();
    }
    #[cfg(target_arch = "x86_64")]
    if simd_available() {
        return avx2::repacked_kernels();
    }
    (
        |r, a| reference::dot_q4_k_repacked(r, a, false),
        |r, a| std::array::from_fn(|k| reference::dot_q4_k_repacked(r, a[k], true)),
    )
}

/// The K-quant kernels of `dtype` in llama.cpp's tiled order ([`KOrder::Tiled`]) on
/// this CPU, one activation row and four; None for the other types.
fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        return avx512::tiled_kernels(dtype);
    }
    #[cfg(target_arch = "x86_64")]
    if simd_available() {
        return avx2::tiled_kernels(dtype);
    }
    reference::tiled_kernels(dtype)
}

thread_local! {
    /// Set inside [`row_invariant`].
    static ROW_INVARIANT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with every prompt row's matrix products summed as a single row's are (this
/// thread's products; they read the setting before they split over threads), so a
/// prompt's rows equal what decoding them one at a time gives. llama.cpp itself sums a
/// repacked Q4_K matrix's prompt rows in fours in another order (its `gemm` kernel), and
/// a prompt of 8 rows or more of the other K-quant matrices in its tiled one.
pub fn row_invariant<R>(f: impl FnOnce() -> R) -> R {
    crate::threads::with_flag(&ROW_INVARIANT, true, f)
}

/// Whether this thread runs inside [`row_invariant`] (for products outside this module
/// that must then take each row alone, such as f32 weights' one-row kernel).
pub(crate) fn row_invariant_active() -> bool {
    ROW_INVARIANT.with(std::cell::Cell::get)
}

/// The plain twins: dot products that read like the formulas in the module doc, with
/// integer inner sums per block (as the fast kernels have) and f32 outer sums in
/// llama.cpp's order ([`reference::dot_blocks`] for the 32-blocks, the K-quant twins
/// such as [`reference::dot_q4_k_repacked`] for the K-quants), which the fast kernels
/// keep, so they equal their twins bit for bit.
pub mod reference {
    use super::*;

    /// [`super::quantize_activations`] one number at a time: the twin the AVX-512
    /// quantisation is held to, bit for bit.
    pub fn quantize_activations(dtype: GgmlType, x: &[f32]) -> Result<QuantizedActs> {
        quantize_rows(dtype, x, false)
    }

    /// `w · x` for one row, scalar. Same contract as [`super::vec_dot`].
    pub fn vec_dot(dtype: GgmlType, row: &[u8], a: &QuantizedActs) -> Result<f32> {
        check_dot(dtype, row, a)?;
        Ok(kernel(dtype)(row, a))
    }

    pub(super) fn kernel(dtype: GgmlType) -> DotFn {
        match dtype {
            GgmlType::F32 => dot_f32,
            GgmlType::F16 => dot_f16,
            GgmlType::BF16 => dot_bf16,
            GgmlType::Q4_0 => dot_q4_0,
            GgmlType::Q4_1 => dot_q4_1,
            GgmlType::Q5_0 => dot_q5_0,
            GgmlType::Q5_1 => dot_q5_1,
            GgmlType::Q8_0 => dot_q8_0,
            GgmlType::Q4_K => dot_q4_k,
            GgmlType::Q5_K => dot_q5_k,
            GgmlType::Q6_K => dot_q6_k,
        }
    }

    /// f32 weights: Σ w·x in f32.
    fn dot_f32(row: &[u8], a: &QuantizedActs) -> f32 {
        row.chunks_exact(4)
            .zip(&a.f32s)
            .map(|(c, &v)| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * v)
            .sum()
    }

    fn dot_f16(row: &[u8], a: &QuantizedActs) -> f32 {
        row.chunks_exact(2)
            .zip(&a.f32s)
            .map(|(c, &v)| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32() * v)
            .sum()
    }

    fn dot_bf16(row: &[u8], a: &QuantizedActs) -> f32 {
        row.chunks_exact(2)
            .zip(&a.f32s)
            .map(|(c, &v)| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32() * v)
            .sum()
    }

    /// The 32-blocks' dot in llama.cpp's order: per block, eight partial integer sums
    /// (lane k: numbers 4k..4k+3) of `w_i · qx_i` where `block(i)` gives the block's
    /// 32 weight integers, its scale `d · dx` and `(m, s)` (zero for kinds without a
    /// minimum); each lane `acc_k = fma(d · dx, sum_k, acc_k)` block after block; the
    /// lanes summed as ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)); plus `Σ fma(m, s)`.
    pub fn dot_blocks(
        row: &[u8],
        a: &QuantizedActs,
        bytes: usize,
        block: impl Fn(&[u8], usize) -> ([i32; 32], f32, f32, f32),
    ) -> f32 {
        let mut acc = [0.0f32; 8];
        let mut extra = 0.0f32;
        for (i, b) in row.chunks_exact(bytes).enumerate() {
            let (w, sc, m, s) = block(b, i);
            let xq = &a.qs[32 * i..32 * i + 32];
            for (k, lane) in acc.iter_mut().enumerate() {
                let sum: i32 = (4 * k..4 * k + 4).map(|j| w[j] * xq[j] as i32).sum();
                *lane = sc.mul_add(sum as f32, *lane);
            }
            extra = m.mul_add(s, extra);
        }
        let t = [
            acc[0] + acc[4],
            acc[1] + acc[5],
            acc[2] + acc[6],
            acc[3] + acc[7],
        ];
        ((t[0] + t[2]) + (t[1] + t[3])) + extra
    }

    /// The 32 four-bit numbers of a block (low nibbles first), each with `fifth(j)`·16 added.
    fn nibbles(qs: &[u8], fifth: impl Fn(usize) -> i32) -> [i32; 32] {
        std::array::from_fn(|j| {
            let q = if j < 16 {
                qs[j] & 0x0F
            } else {
                qs[j - 16] >> 4
            };
            q as i32 | (fifth(j) << 4)
        })
    }

    /// Σ_blocks d·dx·Σ (q − 8)·qx.
    fn dot_q4_0(row: &[u8], a: &QuantizedActs) -> f32 {
        dot_blocks(row, a, 18, |b, i| {
            let w = nibbles(&b[2..18], |_| 0).map(|q| q - 8);
            (w, f16_at(b, 0) * a.d[i], 0.0, 0.0)
        })
    }

    /// Σ_blocks d·dx·Σ q·qx + m·(dx·Σ qx).
    fn dot_q4_1(row: &[u8], a: &QuantizedActs) -> f32 {
        dot_blocks(row, a, 20, |b, i| {
            let w = nibbles(&b[4..20], |_| 0);
            (w, f16_at(b, 0) * a.d[i], f16_at(b, 2), a.sum[i])
        })
    }

    /// Σ_blocks d·dx·Σ (q − 16)·qx, q with its fifth bit from qh.
    fn dot_q5_0(row: &[u8], a: &QuantizedActs) -> f32 {
        dot_blocks(row, a, 22, |b, i| {
            let qh = u32_at(b, 2);
            let w = nibbles(&b[6..22], |j| ((qh >> j) & 1) as i32).map(|q| q - 16);
            (w, f16_at(b, 0) * a.d[i], 0.0, 0.0)
        })
    }

    /// Σ_blocks d·dx·Σ q·qx + m·(dx·Σ qx), q with its fifth bit from qh.
    fn dot_q5_1(row: &[u8], a: &QuantizedActs) -> f32 {
        dot_blocks(row, a, 24, |b, i| {
            let qh = u32_at(b, 4);
            let w = nibbles(&b[8..24], |j| ((qh >> j) & 1) as i32);
            (w, f16_at(b, 0) * a.d[i], f16_at(b, 2), a.sum[i])
        })
    }

    /// Σ_blocks d·dx·Σ q·qx.
    fn dot_q8_0(row: &[u8], a: &QuantizedActs) -> f32 {
        dot_blocks(row, a, 34, |b, i| {
            let w: [i32; 32] = std::array::from_fn(|j| (b[2 + j] as i8) as i32);
            (w, f16_at(b, 0) * a.d[i], 0.0, 0.0)
        })
    }

    /// Q4_K and Q5_K: Σ_blocks dx·(d·Σ_j sc_j Σ_{i∈j} q_i·qx_i − dmin·Σ_j mn_j Σ_{i∈j} qx_i).
    /// The integer parts of one Q4_K / Q5_K 256-block against its activations, as
    /// llama.cpp's AVX2 kernels hold them: `sums[j][k]` for the step `j` over sub-blocks
    /// 2j and 2j + 1 is lane k's `Σ sc · q · qx` over numbers 4k..4k+3 of each of the two
    /// (eight i32 lanes), and `mins[j] = mn_2j · s_2j + mn_2j+1 · s_2j+1` with `s` the
    /// 32-sums of the activations. All exact integers.
    pub(super) fn k45_parts(b: &[u8], xq: &[i8], bsums: &[i32], five: bool) -> K45Parts {
        let scales = &b[4..16];
        let (qh, qs): (&[u8], &[u8]) = if five {
            (&b[16..48], &b[48..176])
        } else {
            (&[], &b[16..144])
        };
        let mut p = K45Parts {
            sums: [[0; 8]; 4],
            mins: [0; 4],
        };
        for j in 0..8 {
            let (sc, mn) = k_scale_min(j, scales);
            let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
            for l in 0..32 {
                let mut q = if j % 2 == 0 {
                    chunk[l] & 0x0F
                } else {
                    chunk[l] >> 4
                };
                if five {
                    q |= ((qh[l] >> j) & 1) << 4;
                }
                p.sums[j / 2][l / 4] += sc as i32 * q as i32 * xq[32 * j + l] as i32;
            }
            p.mins[j / 2] += mn as i32 * (bsums[2 * j] + bsums[2 * j + 1]);
        }
        p
    }

    /// Q4_K and Q5_K in llama.cpp's `ggml_vec_dot_q4_K_q8_K` / `_q5_K_` order (AVX2):
    /// per block, the eight lanes of Σ_j sums[j] meet `d·dx` in one FMA each; the minimum
    /// sums meet `−dx·dmin` in four lanes (Q4_K, folded at the end as (0 + 2) + (1 + 3))
    /// or, summed, in one f32 chain (Q5_K); the lanes are summed by [`hsum8`].
    fn dot_k45(row: &[u8], a: &QuantizedActs, five: bool) -> f32 {
        let bb = if five { 176 } else { 144 };
        let mut acc = [0.0f32; 8];
        let mut acc_m = [0.0f32; 4];
        let mut summs = 0.0f32;
        for (i, b) in row.chunks_exact(bb).enumerate() {
            let p = k45_parts(
                b,
                &a.qs[256 * i..256 * i + 256],
                &a.bsums[16 * i..16 * i + 16],
                five,
            );
            let d = a.d[i] * f16_at(b, 0);
            let dmin = -a.d[i] * f16_at(b, 2);
            if five {
                summs = dmin.mul_add(p.mins.iter().sum::<i32>() as f32, summs);
            } else {
                for (m, &v) in acc_m.iter_mut().zip(&p.mins) {
                    *m = dmin.mul_add(v as f32, *m);
                }
            }
            for (k, l) in acc.iter_mut().enumerate() {
                let s: i32 = p.sums.iter().map(|sj| sj[k]).sum();
                *l = d.mul_add(s as f32, *l);
            }
        }
        let m = if five {
            summs
        } else {
            (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])
        };
        crate::ops::ggml::hsum8(&acc) + m
    }

    fn dot_q4_k(row: &[u8], a: &QuantizedActs) -> f32 {
        dot_k45(row, a, false)
    }

    fn dot_q5_k(row: &[u8], a: &QuantizedActs) -> f32 {
        dot_k45(row, a, true)
    }

    /// Q4_K in the order of llama.cpp's repacked kernels (its weights interleaved eight
    /// rows at a time, `ggml_gemv_q4_K_8x8_q8_K` and `ggml_gemm_q4_K_8x8_q8_K`, which it
    /// uses for every Q4_K matrix whose row count is a multiple of 8 on an AVX2 CPU):
    /// each output is one f32 chain. The token path (`grouped` false) adds per block
    /// `fma(Σ sums, d·dx)` and `fma(Σ mins, dmin·dx)`; the prompt path for rows in
    /// groups of four (`grouped` true) does so once per step j of 64 numbers. The result
    /// is the first chain minus the second.
    pub fn dot_q4_k_repacked(row: &[u8], a: &QuantizedActs, grouped: bool) -> f32 {
        let (mut acc, mut acc_m) = (0.0f32, 0.0f32);
        for (i, b) in row.chunks_exact(144).enumerate() {
            let p = k45_parts(
                b,
                &a.qs[256 * i..256 * i + 256],
                &a.bsums[16 * i..16 * i + 16],
                false,
            );
            let (d, dmin) = (f16_at(b, 0) * a.d[i], f16_at(b, 2) * a.d[i]);
            let step = |s: &[[i32; 8]], m: &[i32]| -> (f32, f32) {
                let s: i32 = s.iter().flatten().sum();
                (s as f32, m.iter().sum::<i32>() as f32)
            };
            if grouped {
                for j in 0..4 {
                    let (s, m) = step(&p.sums[j..j + 1], &p.mins[j..j + 1]);
                    acc = s.mul_add(d, acc);
                    acc_m = m.mul_add(dmin, acc_m);
                }
            } else {
                let (s, m) = step(&p.sums, &p.mins);
                acc = s.mul_add(d, acc);
                acc_m = m.mul_add(dmin, acc_m);
            }
        }
        acc - acc_m
    }

    /// Q4_K (`five` false) and Q5_K in the order of llama.cpp's tiled product (its
    /// `ggml_compute_forward_mul_mat_tiled`, for 8 activation rows or more): per block `r = fma(−dmin, M, d·S)` with `S = Σ sums`, `M =
    /// Σ mins`, then `acc = fma(r, dx, acc)`.
    pub fn dot_k45_tiled(row: &[u8], a: &QuantizedActs, five: bool) -> f32 {
        let bb = if five { 176 } else { 144 };
        let mut acc = 0.0f32;
        for (i, b) in row.chunks_exact(bb).enumerate() {
            let p = k45_parts(
                b,
                &a.qs[256 * i..256 * i + 256],
                &a.bsums[16 * i..16 * i + 16],
                five,
            );
            let s: i32 = p.sums.iter().flatten().sum();
            let m: i32 = p.mins.iter().sum();
            let r = (-f16_at(b, 2)).mul_add(m as f32, f16_at(b, 0) * s as f32);
            acc = r.mul_add(a.d[i], acc);
        }
        acc
    }

    /// The twins in llama.cpp's tiled order ([`KOrder::Tiled`]): one activation row and
    /// four; None for the types it does not tile.
    pub(super) fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
        match dtype {
            GgmlType::Q4_K => Some((
                |r, a| dot_k45_tiled(r, a, false),
                |r, a| std::array::from_fn(|k| dot_k45_tiled(r, a[k], false)),
            )),
            GgmlType::Q5_K => Some((
                |r, a| dot_k45_tiled(r, a, true),
                |r, a| std::array::from_fn(|k| dot_k45_tiled(r, a[k], true)),
            )),
            GgmlType::Q6_K => Some((dot_q6_k_tiled, |r, a| {
                std::array::from_fn(|k| dot_q6_k_tiled(r, a[k]))
            })),
            _ => None,
        }
    }

    /// Q6_K in the order of llama.cpp's tiled product (see [`dot_k45_tiled`]): per block
    /// `acc = fma(d · S, dx, acc)` with `S` the block's exact `Σ sc · (q − 32) · qx`.
    pub fn dot_q6_k_tiled(row: &[u8], a: &QuantizedActs) -> f32 {
        let mut acc = 0.0f32;
        for (i, b) in row.chunks_exact(210).enumerate() {
            let s = q6_k_total(b, &a.qs[256 * i..256 * i + 256]);
            acc = (f16_at(b, 208) * s as f32).mul_add(a.d[i], acc);
        }
        acc
    }

    /// `Σ sc · (q − 32) · qx` of one Q6_K block, exact.
    fn q6_k_total(b: &[u8], xq: &[i8]) -> i32 {
        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
        let mut s = 0i32;
        for e in 0..256 {
            let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
            let lb = ql[64 * n + 32 * (k % 2) + l];
            let lo = if k < 2 { lb & 0x0F } else { lb >> 4 };
            let hi = (qh[32 * n + l] >> (2 * k)) & 3;
            let q = (lo | (hi << 4)) as i32 - 32;
            s += (sc[e / 16] as i8) as i32 * q * xq[e] as i32;
        }
        s
    }

    /// Q6_K in llama.cpp's `ggml_vec_dot_q6_K_q8_K` order (AVX2): per block, eight i32
    /// lanes (lane k: numbers 4k..4k+3 of every 32, times their group's scale), each less
    /// `32 · (sc_2k · s_2k + sc_2k+1 · s_2k+1)` (the −32 offset, from the 16-sums `s`),
    /// one FMA with `d·dx` per lane; the lanes summed by [`hsum8`].
    fn dot_q6_k(row: &[u8], a: &QuantizedActs) -> f32 {
        let mut acc = [0.0f32; 8];
        for (i, b) in row.chunks_exact(210).enumerate() {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = a.d[i] * f16_at(b, 208);
            let xq = &a.qs[256 * i..256 * i + 256];
            let bs = &a.bsums[16 * i..16 * i + 16];
            let mut lanes = [0i32; 8];
            for n in 0..2 {
                for k in 0..4 {
                    for l in 0..32 {
                        let lb = ql[64 * n + 32 * (k % 2) + l];
                        let lo = if k < 2 { lb & 0x0F } else { lb >> 4 };
                        let hi = (qh[32 * n + l] >> (2 * k)) & 3;
                        let q = (lo | (hi << 4)) as i32;
                        let e = 128 * n + 32 * k + l;
                        lanes[l / 4] += (sc[e / 16] as i8) as i32 * q * xq[e] as i32;
                    }
                }
            }
            for (k, (l, v)) in acc.iter_mut().zip(lanes).enumerate() {
                let off = (sc[2 * k] as i8) as i32 * bs[2 * k]
                    + (sc[2 * k + 1] as i8) as i32 * bs[2 * k + 1];
                *l = d.mul_add((v - 32 * off) as f32, *l);
            }
        }
        crate::ops::ggml::hsum8(&acc)
    }
}

/// The exact integer parts of a Q4_K / Q5_K block's dot ([`reference::k45_parts`]).
pub(crate) struct K45Parts {
    /// Per step of 64 numbers, the eight i32 lanes.
    pub(crate) sums: [[i32; 8]; 4],
    /// Per step, the minimums times the activations' 32-sums.
    pub(crate) mins: [i32; 4],
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! AVX2 + FMA kernels. Each is selected by [`kernel`] only after `simd_available()`
    //! said yes; the wrappers' `unsafe` blocks rely on that.
    use std::arch::x86_64::*;

    use super::*;

    pub(super) fn kernel(dtype: GgmlType) -> DotFn {
        match dtype {
            GgmlType::F32 => dot_f32,
            GgmlType::Q4_0 => |r, a| unsafe { q4_0(r, a) }, // SAFETY: AVX2+FMA detected
            GgmlType::Q4_1 => |r, a| unsafe { q4_1(r, a) }, // SAFETY: AVX2+FMA detected
            GgmlType::Q5_0 => |r, a| unsafe { q5_0(r, a) }, // SAFETY: AVX2+FMA detected
            GgmlType::Q5_1 => |r, a| unsafe { q5_1(r, a) }, // SAFETY: AVX2+FMA detected
            GgmlType::Q8_0 => |r, a| unsafe { q8_0(r, a) }, // SAFETY: AVX2+FMA detected
            // SAFETY (both): AVX2+FMA detected.
            GgmlType::Q4_K => |r, a| unsafe { q45_k(r, a, false, KOrder::Dot) },
            GgmlType::Q5_K => |r, a| unsafe { q45_k(r, a, true, KOrder::Dot) },
            GgmlType::Q6_K => |r, a| unsafe { q6_k(r, a, false) }, // SAFETY: AVX2+FMA detected
            _ => reference::kernel(dtype),
        }
    }

    /// The K-quant kernels of `dtype` in llama.cpp's tiled order ([`KOrder::Tiled`]):
    /// one activation row, and four (one at a time).
    pub(super) fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
        // SAFETY (all): AVX2+FMA detected; the callers check rows and acts.
        match dtype {
            GgmlType::Q4_K => Some((
                |r, a| unsafe { q45_k(r, a, false, KOrder::Tiled) },
                |r, a| std::array::from_fn(|k| unsafe { q45_k(r, a[k], false, KOrder::Tiled) }),
            )),
            GgmlType::Q5_K => Some((
                |r, a| unsafe { q45_k(r, a, true, KOrder::Tiled) },
                |r, a| std::array::from_fn(|k| unsafe { q45_k(r, a[k], true, KOrder::Tiled) }),
            )),
            GgmlType::Q6_K => Some((
                |r, a| unsafe { q6_k(r, a, true) },
                |r, a| std::array::from_fn(|k| unsafe { q6_k(r, a[k], true) }),
            )),
            _ => None,
        }
    }

    /// Q4_K in the order of llama.cpp's repacked kernels ([`KOrder::Gemv`] for one row,
    /// [`KOrder::Gemm`] for each of four).
    pub(super) fn repacked_kernels() -> (DotFn, Dot4Fn) {
        (
            // SAFETY (both): AVX2+FMA detected; the callers check rows and acts.
            |r, a| unsafe { q45_k(r, a, false, KOrder::Gemv) },
            |r, a| std::array::from_fn(|k| unsafe { q45_k(r, a[k], false, KOrder::Gemm) }),
        )
    }

    fn dot_f32(row: &[u8], a: &QuantizedActs) -> f32 {
        // SAFETY: selected only after AVX2+FMA were detected; lengths checked by the caller.
        unsafe { f32_dot(row, &a.f32s) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn f32_dot(row: &[u8], x: &[f32]) -> f32 {
        let n = x.len();
        let w = row.as_ptr() as *const f32;
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, s) in acc.iter_mut().enumerate() {
                let wv = _mm256_loadu_ps(w.add(i + 8 * k));
                *s = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.as_ptr().add(i + 8 * k)), *s);
            }
            i += 32;
        }
        let mut s = hsum_ps(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ));
        while i < n {
            s += std::ptr::read_unaligned(w.add(i)) * x[i];
            i += 1;
        }
        s
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn hsum_ps(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Eight i32 sums of four products each of signed 8-bit `w` and `x`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn mul_sum_i8(w: __m256i, x: __m256i) -> __m256i {
        let aw = _mm256_sign_epi8(w, w);
        let sx = _mm256_sign_epi8(x, w);
        _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1))
    }

    /// Eight i32 sums of four products each of unsigned 8-bit `w` (≤ 127) and signed `x`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn mul_sum_u8_i8(w: __m256i, x: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
    }

    /// 16 bytes of nibbles → 32 bytes: low nibbles (numbers 0..16) then high (16..32).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn nibbles32(p: *const u8) -> __m256i {
        let b = _mm_loadu_si128(p as *const __m128i);
        let m4 = _mm_set1_epi8(0x0F);
        _mm256_set_m128i(
            _mm_and_si128(_mm_srli_epi16(b, 4), m4),
            _mm_and_si128(b, m4),
        )
    }

    /// 32 bits → 32 bytes, byte i = 0x10 if bit i is set (the fifth bit of number i).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn fifth_bits(qh: u32) -> __m256i {
        let v = _mm256_set1_epi32(qh as i32);
        let shuf = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        let bytes = _mm256_shuffle_epi8(v, shuf);
        let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }

    /// The f16 at `p` as f32 (F16C; `half`'s conversion checks the CPU on every call).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f16p(p: *const u8) -> f32 {
        let bits = std::ptr::read_unaligned(p as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// Σ over `nb` blocks of `scale_i · isum_i` (+ Σ `m_i · s_i`), where `block(i)` gives
    /// (scale, eight i32 partial sums, m, s), in llama.cpp's order: one eight-lane
    /// accumulator taking `fma(scale, isum, acc)` block after block, reduced by
    /// [`hsum_ps`], plus the `m · s` terms summed one FMA at a time.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn sum_blocks(nb: usize, block: impl Fn(usize) -> (f32, __m256i, f32, f32)) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut extra = 0.0f32;
        for i in 0..nb {
            let (sc, v, m, s) = block(i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(sc), _mm256_cvtepi32_ps(v), acc);
            extra = m.mul_add(s, extra);
        }
        hsum_ps(acc) + extra
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_0(row: &[u8], a: &QuantizedActs) -> f32 {
        let (w, x, d) = (row.as_ptr(), a.qs.as_ptr(), a.d.as_ptr());
        sum_blocks(a.d.len(), |i| {
            let b = w.add(18 * i);
            let q = _mm256_sub_epi8(nibbles32(b.add(2)), _mm256_set1_epi8(8));
            let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
            (f16p(b) * *d.add(i), mul_sum_i8(q, xv), 0.0, 0.0)
        })
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_1(row: &[u8], a: &QuantizedActs) -> f32 {
        let (w, x, d, s) = (row.as_ptr(), a.qs.as_ptr(), a.d.as_ptr(), a.sum.as_ptr());
        sum_blocks(a.d.len(), |i| {
            let b = w.add(20 * i);
            let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
            (
                f16p(b) * *d.add(i),
                mul_sum_u8_i8(nibbles32(b.add(4)), xv),
                f16p(b.add(2)),
                *s.add(i),
            )
        })
    }

    /// Dots of `RW` weight rows with `RA` activation rows at once, for Q4_1 (`Q8` false)
    /// or Q8_0 (`Q8` true), reading the weight blocks' scales (and Q4_1's minimums) from
    /// a per-row f32 table ([`QMatrix::scale_table`]) instead of converting f16 per block:
    /// eight blocks' scales are multiplied with eight activation scales in one step. Each
    /// weight block is unpacked once for all activation rows, each activation block
    /// loaded once for all weight rows, and every pair's arithmetic is the same whatever
    /// the tile (one accumulator per pair; Q4_1's `Σ m·sx` as a separate dot), so a result
    /// never depends on the tile it was computed in (batch invariance).
    ///
    /// # Safety
    /// AVX2+FMA+F16C present; every row is `acts[0].len` numbers of the type, each
    /// `scales[w]` its row's table (nb scales, then nb minimums for Q4_1), and every
    /// `acts[j]` prepared as Q8_0 of the same length.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile<const Q8: bool, const RW: usize, const RA: usize>(
        rows: [&[u8]; RW],
        scales: [&[f32]; RW],
        acts: [&QuantizedActs; RA],
        out: &mut [[f32; RA]; RW],
    ) {
        let nb = acts[0].d.len();
        let mut acc = [[_mm256_setzero_ps(); RA]; RW];
        let mut s8 = [[_mm256_setzero_ps(); RA]; RW];
        let groups = nb / 8;
        for g in 0..groups {
            // The group's eight scale products d_w · dx_a, one per lane.
            for w in 0..RW {
                let dw = _mm256_loadu_ps(scales[w].as_ptr().add(8 * g));
                for a in 0..RA {
                    s8[w][a] = _mm256_mul_ps(dw, _mm256_loadu_ps(acts[a].d.as_ptr().add(8 * g)));
                }
            }
            for j in 0..8 {
                let lane = _mm256_set1_epi32(j as i32);
                tile_block::<Q8, RW, RA>(&rows, &acts, 8 * g + j, &mut acc, |w, a| {
                    _mm256_permutevar8x32_ps(s8[w][a], lane)
                });
            }
        }
        for i in 8 * groups..nb {
            tile_block::<Q8, RW, RA>(&rows, &acts, i, &mut acc, |w, a| {
                _mm256_set1_ps(*scales[w].get_unchecked(i) * *acts[a].d.get_unchecked(i))
            });
        }
        for w in 0..RW {
            for a in 0..RA {
                // llama.cpp's order: Σ m·s one FMA at a time, after the lanes.
                let extra = if Q8 {
                    0.0
                } else {
                    scales[w][nb..2 * nb]
                        .iter()
                        .zip(&acts[a].sum)
                        .fold(0.0f32, |e, (m, s)| m.mul_add(*s, e))
                };
                out[w][a] = hsum_ps(acc[w][a]) + extra;
            }
        }
    }

    /// Block `i` of every (weight row, activation row) pair of a [`tile`] into `acc`:
    /// `acc = fma(scale(w, a), Σ4 q·qx, acc)`, with the pair's eight 4-number integer sums.
    ///
    /// # Safety
    /// As [`tile`]'s; `i` is a block of the rows.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_block<const Q8: bool, const RW: usize, const RA: usize>(
        rows: &[&[u8]; RW],
        acts: &[&QuantizedActs; RA],
        i: usize,
        acc: &mut [[__m256; RA]; RW],
        scale: impl Fn(usize, usize) -> __m256,
    ) {
        let bb = if Q8 { 34 } else { 20 };
        let q: [__m256i; RW] = std::array::from_fn(|w| {
            let b = rows[w].as_ptr().add(bb * i);
            if Q8 {
                _mm256_loadu_si256(b.add(2) as *const __m256i)
            } else {
                nibbles32(b.add(4))
            }
        });
        let xv: [__m256i; RA] = std::array::from_fn(|a| {
            _mm256_loadu_si256(acts[a].qs.as_ptr().add(32 * i) as *const __m256i)
        });
        for w in 0..RW {
            for a in 0..RA {
                let v = if Q8 {
                    mul_sum_i8(q[w], xv[a])
                } else {
                    mul_sum_u8_i8(q[w], xv[a])
                };
                acc[w][a] = _mm256_fmadd_ps(scale(w, a), _mm256_cvtepi32_ps(v), acc[w][a]);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q5_0(row: &[u8], a: &QuantizedActs) -> f32 {
        let (w, x, d) = (row.as_ptr(), a.qs.as_ptr(), a.d.as_ptr());
        sum_blocks(a.d.len(), |i| {
            let b = w.add(22 * i);
            let qh = std::ptr::read_unaligned(b.add(2) as *const u32);
            let q = _mm256_sub_epi8(
                _mm256_or_si256(nibbles32(b.add(6)), fifth_bits(qh)),
                _mm256_set1_epi8(16),
            );
            let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
            (f16p(b) * *d.add(i), mul_sum_i8(q, xv), 0.0, 0.0)
        })
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q5_1(row: &[u8], a: &QuantizedActs) -> f32 {
        let (w, x, d, s) = (row.as_ptr(), a.qs.as_ptr(), a.d.as_ptr(), a.sum.as_ptr());
        sum_blocks(a.d.len(), |i| {
            let b = w.add(24 * i);
            let qh = std::ptr::read_unaligned(b.add(4) as *const u32);
            let q = _mm256_or_si256(nibbles32(b.add(8)), fifth_bits(qh));
            let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
            (
                f16p(b) * *d.add(i),
                mul_sum_u8_i8(q, xv),
                f16p(b.add(2)),
                *s.add(i),
            )
        })
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_0(row: &[u8], a: &QuantizedActs) -> f32 {
        let (w, x, d) = (row.as_ptr(), a.qs.as_ptr(), a.d.as_ptr());
        sum_blocks(a.d.len(), |i| {
            let b = w.add(34 * i);
            let q = _mm256_loadu_si256(b.add(2) as *const __m256i);
            let xv = _mm256_loadu_si256(x.add(32 * i) as *const __m256i);
            (f16p(b) * *d.add(i), mul_sum_i8(q, xv), 0.0, 0.0)
        })
    }

    /// Q4_K (`five` false) and Q5_K (`five` true) in `order` (Q5_K: always
    /// [`KOrder::Dot`]): per block the four steps of 64 numbers as eight i32 lanes each
    /// (lane k: numbers 4k..4k+3 of both sub-blocks, times their scales) and the minimum
    /// sums, which [`K45Acc`] meets with the scales as llama.cpp's kernel of that order.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q45_k(row: &[u8], a: &QuantizedActs, five: bool, order: KOrder) -> f32 {
        let bb = if five { 176 } else { 144 };
        let m4 = _mm256_set1_epi8(0x0F);
        let one = _mm256_set1_epi8(1);
        let mut acc = K45Acc::new();
        for i in 0..a.d.len() {
            let blk = &row[bb * i..bb * (i + 1)];
            let scales = &blk[4..16];
            let qs = if five {
                blk.as_ptr().add(48)
            } else {
                blk.as_ptr().add(16)
            };
            let qh = if five {
                _mm256_loadu_si256(blk.as_ptr().add(16) as *const __m256i)
            } else {
                _mm256_setzero_si256()
            };
            let xq = a.qs.as_ptr().add(256 * i);
            let mut steps = [_mm256_setzero_si256(); 4];
            let (sc8, _) = k_scales_mins(scales);
            for (c, step) in steps.iter_mut().enumerate() {
                let (sc0, sc1) = (sc8[2 * c], sc8[2 * c + 1]);
                let qb = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
                let mut lo = _mm256_and_si256(qb, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
                if five {
                    let h0 = _mm256_and_si256(
                        _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32)),
                        one,
                    );
                    let h1 = _mm256_and_si256(
                        _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32 + 1)),
                        one,
                    );
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
                }
                let xl = _mm256_loadu_si256(xq.add(64 * c) as *const __m256i);
                let xh = _mm256_loadu_si256(xq.add(64 * c + 32) as *const __m256i);
                let pl =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_set1_epi16(sc0 as i16));
                let ph =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), _mm256_set1_epi16(sc1 as i16));
                *step = _mm256_add_epi32(pl, ph);
            }
            let mins = k45_mins(scales, &a.bsums[16 * i..16 * i + 16]);
            acc.block(steps, mins, blk.as_ptr(), a.d[i], five, order);
        }
        acc.finish(five, order)
    }

    /// `mins[j] = mn_2j · s_2j + mn_2j+1 · s_2j+1` of a Q4_K / Q5_K block, with `s` the
    /// 32-sums of the activations (`bsums`: the block's 16-sums).
    #[inline]
    pub(super) fn k45_mins(scales: &[u8], bsums: &[i32]) -> [i32; 4] {
        let (_, mn) = k_scales_mins(scales);
        std::array::from_fn(|j| {
            mn[2 * j] as i32 * (bsums[4 * j] + bsums[4 * j + 1])
                + mn[2 * j + 1] as i32 * (bsums[4 * j + 2] + bsums[4 * j + 3])
        })
    }

    /// The f32 accumulators of a Q4_K / Q5_K dot in one of llama.cpp's orders
    /// ([`reference::dot_k45`], [`reference::dot_q4_k_repacked`]), fed one block at a
    /// time with its exact integer parts.
    pub(super) struct K45Acc {
        /// [`KOrder::Dot`]: eight lanes of `fma(d·dx, Σ steps)`.
        acc: __m256,
        /// Q4_K [`KOrder::Dot`]: four lanes of `fma(−dx·dmin, mins)`.
        acc_m: __m128,
        /// Q5_K: `fma(−dx·dmin, Σ mins)`; [`KOrder::Gemv`]/[`KOrder::Gemm`]: the
        /// minimums' chain.
        summs: f32,
        /// [`KOrder::Gemv`]/[`KOrder::Gemm`]: the products' chain.
        chain: f32,
    }

    impl K45Acc {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn new() -> K45Acc {
            K45Acc {
                acc: _mm256_setzero_ps(),
                acc_m: _mm_setzero_ps(),
                summs: 0.0,
                chain: 0.0,
            }
        }

        /// One block: its four steps' lanes, its minimum sums, the block (for `d` and
        /// `dmin` at its start) and the activations' scale `dx`.
        ///
        /// # Safety
        /// `blk` points at a Q4_K / Q5_K block (four readable bytes).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn block(
            &mut self,
            steps: [__m256i; 4],
            mins: [i32; 4],
            blk: *const u8,
            dx: f32,
            five: bool,
            order: KOrder,
        ) {
            let (dw, dminw) = (f16p(blk), f16p(blk.add(2)));
            match order {
                KOrder::Dot => {
                    let sumi = _mm256_add_epi32(
                        _mm256_add_epi32(steps[0], steps[1]),
                        _mm256_add_epi32(steps[2], steps[3]),
                    );
                    self.acc = _mm256_fmadd_ps(
                        _mm256_set1_ps(dx * dw),
                        _mm256_cvtepi32_ps(sumi),
                        self.acc,
                    );
                    let dmin = -dx * dminw;
                    if five {
                        self.summs = dmin.mul_add(mins.iter().sum::<i32>() as f32, self.summs);
                    } else {
                        let m = _mm_loadu_si128(mins.as_ptr() as *const __m128i);
                        self.acc_m =
                            _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(m), self.acc_m);
                    }
                }
                KOrder::Gemv => {
                    let s = hsum_epi32(_mm256_add_epi32(
                        _mm256_add_epi32(steps[0], steps[1]),
                        _mm256_add_epi32(steps[2], steps[3]),
                    ));
                    self.chain = (s as f32).mul_add(dw * dx, self.chain);
                    let m: i32 = mins.iter().sum();
                    self.summs = (m as f32).mul_add(dminw * dx, self.summs);
                }
                KOrder::Gemm => {
                    for (st, &m) in steps.iter().zip(&mins) {
                        self.chain = (hsum_epi32(*st) as f32).mul_add(dw * dx, self.chain);
                        self.summs = (m as f32).mul_add(dminw * dx, self.summs);
                    }
                }
                KOrder::Tiled => {
                    let s = hsum_epi32(_mm256_add_epi32(
                        _mm256_add_epi32(steps[0], steps[1]),
                        _mm256_add_epi32(steps[2], steps[3]),
                    ));
                    let m: i32 = mins.iter().sum();
                    let r = (-dminw).mul_add(m as f32, dw * s as f32);
                    self.chain = r.mul_add(dx, self.chain);
                }
            }
        }

        /// The dot product.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn finish(&self, five: bool, order: KOrder) -> f32 {
            // SAFETY: hsum_ps needs AVX2, which this function's features include.
            let hsum_ps = |v| unsafe { hsum_ps(v) };
            match order {
                KOrder::Dot if five => hsum_ps(self.acc) + self.summs,
                KOrder::Dot => {
                    // llama.cpp's fold of the four minimum lanes: (0 + 2) + (1 + 3).
                    let m = _mm_add_ps(self.acc_m, _mm_movehl_ps(self.acc_m, self.acc_m));
                    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
                    hsum_ps(self.acc) + _mm_cvtss_f32(m)
                }
                KOrder::Tiled => self.chain,
                _ => self.chain - self.summs,
            }
        }
    }

    /// The eight i32 lanes summed (exact while the sum fits).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn hsum_epi32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }

    /// Q6_K in llama.cpp's dot order, or (`tiled`) in its tiled product's
    /// ([`KOrder::Tiled`]).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q6_k(row: &[u8], a: &QuantizedActs, tiled: bool) -> f32 {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(3);
        let mut acc = _mm256_setzero_ps();
        let mut chain = 0.0f32;
        for i in 0..a.d.len() {
            let blk = &row[210 * i..210 * (i + 1)];
            let sc = &blk[192..208];
            let dw = f16p(blk.as_ptr().add(208));
            let xq = a.qs.as_ptr().add(256 * i);
            let mut sumi = _mm256_setzero_si256();
            for n in 0..2 {
                let ql0 = _mm256_loadu_si256(blk.as_ptr().add(64 * n) as *const __m256i);
                let ql1 = _mm256_loadu_si256(blk.as_ptr().add(64 * n + 32) as *const __m256i);
                let qh = _mm256_loadu_si256(blk.as_ptr().add(128 + 32 * n) as *const __m256i);
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(ql0, m4),
                        _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(ql1, m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4),
                    ),
                ];
                for (k, qk) in q.iter().enumerate() {
                    let g0 = 8 * n + 2 * k;
                    let x = _mm256_loadu_si256(xq.add(128 * n + 32 * k) as *const __m256i);
                    let p = _mm256_maddubs_epi16(*qk, x);
                    let s = _mm256_set_m128i(
                        _mm_set1_epi16((sc[g0 + 1] as i8) as i16),
                        _mm_set1_epi16((sc[g0] as i8) as i16),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
                }
            }
            let off = q6_k_offsets(sc, &a.bsums[16 * i..16 * i + 16]);
            let sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
            if tiled {
                chain = (dw * hsum_epi32(sumi) as f32).mul_add(a.d[i], chain);
            } else {
                let d = dw * a.d[i];
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
            }
        }
        if tiled {
            chain
        } else {
            hsum_ps(acc)
        }
    }

    /// Lane k: `sc_2k · s_2k + sc_2k+1 · s_2k+1` of a Q6_K block (its i8 scales `sc`, the
    /// activations' 16-sums `s`); 32 times it is the lane's share of the `− 32` offset
    /// (llama.cpp's `q8sclsub`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn q6_k_offsets(sc: &[u8], bsums: &[i32]) -> __m256i {
        let o: [i32; 8] = std::array::from_fn(|k| {
            (sc[2 * k] as i8) as i32 * bsums[2 * k]
                + (sc[2 * k + 1] as i8) as i32 * bsums[2 * k + 1]
        });
        // SAFETY: `o` holds eight i32.
        unsafe { _mm256_loadu_si256(o.as_ptr() as *const __m256i) }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! AVX-512 VNNI kernels: the tile kernels of the 32-block types (Q4_0, Q4_1, Q5_0,
    //! Q5_1, Q8_0) — a decoded token's four weight rows as two interleaved pairs
    //! ([`pair_tile`]; where GFNI and BMI2 are), one row two blocks per 512-bit register
    //! ([`tile`]), a prompt's rows in pairs ([`paired_tile`]) — their products summed by
    //! `vpdpbusd` (unsigned 8-bit weights × signed 8-bit activations, four products into
    //! each i32 lane, no saturation); and the K-quant dots, 64 numbers a step. Selected
    //! only after [`available`] said yes; the callers' `unsafe` blocks rely on that.
    //!
    //! `vpdpbusd` wants one operand unsigned, so every weight enters as `u = q + o ≥ 0`
    //! (o = 8 for Q4_0, 16 for Q5_0, 128 for Q8_0 by flipping the sign bit, 0 for the
    //! `_1` kinds) and the integer sum starts at `−o · Σ qx` instead of 0: the block's sum
    //! `Σ (u − o)·qx` is then exactly the twin's `Σ q·qx`.
    use std::arch::x86_64::*;

    use super::*;

    /// Whether this CPU has AVX-512 F/BW/VL/VNNI (and the AVX2 kernels' features, whose
    /// helpers these kernels share).
    pub(super) fn available() -> bool {
        simd_available()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
    }

    /// Whether the CPU also runs [`pair_tile`]: [`available`] plus GFNI (splits a
    /// byte's nibbles in one instruction) and BMI2 (spreads the fifth bits).
    pub(super) fn pairs_available() -> bool {
        available() && is_x86_feature_detected!("gfni") && is_x86_feature_detected!("bmi2")
    }

    /// Bytes of a block, where its quants start, where its 32 fifth bits start (Q5 kinds),
    /// the weight offset `o`, and whether it has a minimum: per type.
    const fn layout(t: GgmlType) -> (usize, usize, Option<usize>, i8, bool) {
        match t {
            GgmlType::Q4_0 => (18, 2, None, 8, false),
            GgmlType::Q4_1 => (20, 4, None, 0, true),
            GgmlType::Q5_0 => (22, 6, Some(2), 16, false),
            GgmlType::Q5_1 => (24, 8, Some(4), 0, true),
            // Q8_0 (and, unused, anything else): the sign bit flipped, o = 128 (the byte
            // 0x80, read as unsigned by `vpdpbusd`).
            _ => (34, 2, None, i8::MIN, false),
        }
    }

    /// The tile kernel's types as const-generic ids (`GgmlType` is not a const parameter).
    pub(super) const Q4_0: u8 = 0;
    /// See [`Q4_0`].
    pub(super) const Q4_1: u8 = 1;
    /// See [`Q4_0`].
    pub(super) const Q5_0: u8 = 2;
    /// See [`Q4_0`].
    pub(super) const Q5_1: u8 = 3;
    /// See [`Q4_0`].
    pub(super) const Q8_0: u8 = 4;

    const fn dtype(k: u8) -> GgmlType {
        match k {
            Q4_0 => GgmlType::Q4_0,
            Q4_1 => GgmlType::Q4_1,
            Q5_0 => GgmlType::Q5_0,
            Q5_1 => GgmlType::Q5_1,
            _ => GgmlType::Q8_0,
        }
    }

    /// The unsigned weights `u = q + o` of block `b` (and of the next block when `TWO`;
    /// else the upper 32 bytes are don't-care, met by zero activations) as 64 bytes in
    /// number order: block one's 32 numbers, then block two's.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn weights<const K: u8, const TWO: bool>(b: *const u8) -> __m512i {
        let (bb, qs, qh, _, _) = layout(dtype(K));
        if K == Q8_0 {
            let lo = _mm256_loadu_si256(b.add(qs) as *const __m256i);
            let z = if TWO {
                let hi = _mm256_loadu_si256(b.add(bb + qs) as *const __m256i);
                _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
            } else {
                _mm512_zextsi256_si512(lo)
            };
            return _mm512_xor_si512(z, _mm512_set1_epi8(-128));
        }
        // 128-bit lanes: [nibbles of block one ×2, nibbles of block two ×2]; the odd
        // lanes shifted by 4, so after the mask they hold the high nibbles (numbers 16..32).
        let mut z = _mm512_broadcast_i32x4(_mm_loadu_si128(b.add(qs) as *const __m128i));
        if TWO {
            let n = _mm_loadu_si128(b.add(bb + qs) as *const __m128i);
            z = _mm512_mask_broadcast_i32x4(z, 0xFF00, n);
        }
        z = _mm512_mask_srli_epi16(z, 0xFF00_FF00, z, 4);
        z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
        if let Some(h) = qh {
            let mut bits = std::ptr::read_unaligned(b.add(h) as *const u32) as u64;
            if TWO {
                bits |= (std::ptr::read_unaligned(b.add(bb + h) as *const u32) as u64) << 32;
            }
            z = _mm512_mask_add_epi8(z, bits, z, _mm512_set1_epi8(0x10));
        }
        z
    }

    /// The dot kernel for `dtype`: the K-quants here, the rest from [`super::avx2`].
    pub(super) fn kernel(dtype: GgmlType) -> DotFn {
        match dtype {
            // SAFETY (all three): available() said yes.
            GgmlType::Q4_K => |r, a| unsafe { q45_k(r, a, false, KOrder::Dot) },
            GgmlType::Q5_K => |r, a| unsafe { q45_k(r, a, true, KOrder::Dot) },
            GgmlType::Q6_K => |r, a| unsafe { q6_k(r, a, false) },
            _ => super::avx2::kernel(dtype),
        }
    }

    /// The K-quant kernel of one weight row with four activation rows (a prompt's
    /// product), each result equal to [`kernel`]'s; None for the other types.
    pub(super) fn kernel4(dtype: GgmlType) -> Option<Dot4Fn> {
        match dtype {
            // SAFETY (all three): available() said yes; the callers check rows and acts.
            GgmlType::Q4_K => Some(|r, a| unsafe { q45_k_rows::<4>(r, a, false, KOrder::Dot) }),
            GgmlType::Q5_K => Some(|r, a| unsafe { q45_k_rows::<4>(r, a, true, KOrder::Dot) }),
            GgmlType::Q6_K => Some(|r, a| unsafe { q6_k_rows::<4>(r, a, false) }),
            _ => None,
        }
    }

    /// The K-quant kernels of `dtype` in llama.cpp's tiled order ([`KOrder::Tiled`]):
    /// one activation row and four.
    pub(super) fn tiled_kernels(dtype: GgmlType) -> Option<(DotFn, Dot4Fn)> {
        // SAFETY (all): available() said yes; the callers check rows and acts.
        match dtype {
            GgmlType::Q4_K => Some((
                |r, a| unsafe { q45_k(r, a, false, KOrder::Tiled) },
                |r, a| unsafe { q45_k_rows::<4>(r, a, false, KOrder::Tiled) },
            )),
            GgmlType::Q5_K => Some((
                |r, a| unsafe { q45_k(r, a, true, KOrder::Tiled) },
                |r, a| unsafe { q45_k_rows::<4>(r, a, true, KOrder::Tiled) },
            )),
            GgmlType::Q6_K => Some((
                |r, a| unsafe { q6_k(r, a, true) },
                |r, a| unsafe { q6_k_rows::<4>(r, a, true) },
            )),
            _ => None,
        }
    }

    /// Q4_K in the order of llama.cpp's repacked kernels ([`KOrder::Gemv`] for one row
    /// at a time, [`KOrder::Gemm`] for the four-row kernel).
    pub(super) fn repacked_kernels() -> (DotFn, Dot4Fn) {
        (
            // SAFETY (both): available() said yes; the callers check rows and acts.
            |r, a| unsafe { q45_k(r, a, false, KOrder::Gemv) },
            |r, a| unsafe { q45_k_rows::<4>(r, a, false, KOrder::Gemm) },
        )
    }

    /// Q4_K (`five` false) and Q5_K (`five` true) in `order`, 64 numbers (two
    /// sub-blocks) a step: `vpmaddubsw` pairs (q ≤ 31, |qx| ≤ 127: no saturation),
    /// `vpmaddwd` with the sub-blocks' scales. The two halves of a step's i32 sums add up
    /// to the AVX2 kernel's eight lanes, which then meet the same f32 arithmetic in the
    /// same order ([`super::avx2::K45Acc`]): the results equal [`super::avx2`]'s bit for
    /// bit.
    ///
    /// # Safety
    /// [`available`]; `row` and `a` checked by [`check_dot`] for this type.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn q45_k(row: &[u8], a: &QuantizedActs, five: bool, order: KOrder) -> f32 {
        q45_k_rows::<1>(row, [a], five, order)[0]
    }

    /// [`q45_k`] of one weight row with `RA` activation rows: each weight step decoded
    /// once for all of them, each row's arithmetic exactly [`q45_k`]'s (so each result
    /// equals it bit for bit).
    ///
    /// # Safety
    /// As [`q45_k`]'s, for every row of `acts`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn q45_k_rows<const RA: usize>(
        row: &[u8],
        acts: [&QuantizedActs; RA],
        five: bool,
        order: KOrder,
    ) -> [f32; RA] {
        let bb = if five { 176 } else { 144 };
        let mut acc: [super::avx2::K45Acc; RA] =
            std::array::from_fn(|_| super::avx2::K45Acc::new());
        // Four rows in llama.cpp's grouped order: their chains, lane k for row k.
        let (mut rows4, mut mins4) = (_mm_setzero_ps(), _mm_setzero_ps());
        for i in 0..acts[0].d.len() {
            let blk = row.as_ptr().add(bb * i);
            let scales = std::slice::from_raw_parts(blk.add(4), 12);
            let qs = blk.add(if five { 48 } else { 16 });
            let qh = if five {
                _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(16) as *const __m256i))
            } else {
                _mm512_setzero_si512()
            };
            // Each minimum in its two 16-groups' lanes, against the 16-sums: summed four
            // lanes at a time, the four steps' minimum sums (exact integers).
            let (sc8, mn8) = k_scales_mins(scales);
            let mn16 = k45_mins16(&mn8);
            // Each minimum times its 16-group's sum, per activation row (16 lanes, step c in
            // 128-bit lane c).
            let mv: [__m512i; RA] = std::array::from_fn(|k| {
                let bs = _mm512_loadu_si512(acts[k].bsums.as_ptr().add(16 * i) as *const __m512i);
                _mm512_mullo_epi32(mn16, bs)
            });
            let gemm4 = RA == 4 && order == KOrder::Gemm;
            // Four rows in the grouped order: the per-step sums come from one interleaving
            // (below); the others want each row's four step sums.
            let mins: [[i32; 4]; RA] = std::array::from_fn(|k| {
                let mut m = [0i32; 4];
                if !gemm4 {
                    let v = _mm512_add_epi32(mv[k], _mm512_srli_epi64(mv[k], 32));
                    let v = _mm512_add_epi32(v, _mm512_bsrli_epi128(v, 8));
                    let g = _mm512_maskz_compress_epi32(0x1111, v);
                    _mm_storeu_si128(m.as_mut_ptr() as *mut __m128i, _mm512_castsi512_si128(g));
                }
                m
            });
            // gemm4: the rows' scale products, lane k for row k.
            let dx4 = if gemm4 {
                _mm_set_ps(acts[3].d[i], acts[2].d[i], acts[1].d[i], acts[0].d[i])
            } else {
                _mm_setzero_ps()
            };
            let (dw, dminw) = (super::avx2::f16p(blk), super::avx2::f16p(blk.add(2)));
            let sc4 = _mm_mul_ps(_mm_set1_ps(dw), dx4);
            // Dot, Gemv, Tiled: the block's lanes (only their sums per lane or in all
            // are used). Gemm: each step's lanes (`steps`), or for four rows each step's
            // four totals (`totals`).
            let mut sumi = [_mm512_setzero_si512(); RA];
            let mut steps = [[_mm256_setzero_si256(); 4]; RA];
            let fold = |p: __m512i| {
                // The AVX2 kernel's eight lanes: lane k of both sub-blocks of the step.
                _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1))
            };
            for c in 0..4 {
                let (q, sc) = k45_step(qs, qh, &sc8, c, five);
                let mut ps = [_mm512_setzero_si512(); RA];
                for (a, p) in acts.iter().zip(ps.iter_mut()) {
                    let x =
                        _mm512_loadu_si512(a.qs.as_ptr().add(256 * i + 64 * c) as *const __m512i);
                    *p = _mm512_madd_epi16(_mm512_maddubs_epi16(q, x), sc);
                }
                if order != KOrder::Gemm {
                    for (si, p) in sumi.iter_mut().zip(ps) {
                        *si = _mm512_add_epi32(*si, p);
                    }
                } else if gemm4 {
                    // Step c's four totals (lane k: row k) into the four chains.
                    let t = fold_lanes(interleave4(ps[0], ps[1], ps[2], ps[3]));
                    rows4 = _mm_fmadd_ps(_mm_cvtepi32_ps(t), sc4, rows4);
                } else {
                    for (st, p) in steps.iter_mut().zip(ps) {
                        st[c] = fold(p);
                    }
                }
            }
            if gemm4 {
                // The minimums' chains, step after step: 128-bit lane c of the interleaved
                // products holds step c's four sums.
                let mt = interleave4(mv[0], mv[1], mv[2], mv[3]);
                mins4 = min_steps(mt, _mm_mul_ps(_mm_set1_ps(dminw), dx4), mins4);
                continue;
            }
            for k in 0..RA {
                let st = if order == KOrder::Gemm {
                    steps[k]
                } else {
                    let z = _mm256_setzero_si256();
                    [fold(sumi[k]), z, z, z]
                };
                acc[k].block(st, mins[k], blk, acts[k].d[i], five, order);
            }
        }
        if RA == 4 && order == KOrder::Gemm {
            let mut r = [0.0f32; 4];
            _mm_storeu_ps(r.as_mut_ptr(), _mm_sub_ps(rows4, mins4));
            return std::array::from_fn(|k| r[k]);
        }
        std::array::from_fn(|k| acc[k].finish(five, order))
    }

    /// Each of a K-quant block's eight sub-block minimums `mn8` in its two 16-number
    /// groups' i32 lanes (to meet the activations' 16-sums).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn k45_mins16(mn8: &[u8; 8]) -> __m512i {
        let mn16: [i32; 16] = std::array::from_fn(|l| mn8[l / 2] as i32);
        _mm512_loadu_si512(mn16.as_ptr() as *const __m512i)
    }

    /// Step `c` of a Q4_K (`five` false) or Q5_K block: its unsigned weights, numbers
    /// `64c .. 64c + 64` (the low nibbles of `qs[32c..32c+32]`, then the high ones, with
    /// the fifth bits from `qh`, the block's 32 high-bit bytes twice, for Q5_K), and the
    /// two sub-blocks' scales from `sc8` as words (the first's in the lower 16 words).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn k45_step(
        qs: *const u8,
        qh: __m512i,
        sc8: &[u8; 8],
        c: usize,
        five: bool,
    ) -> (__m512i, __m512i) {
        let z = _mm512_broadcast_i64x4(_mm256_loadu_si256(qs.add(32 * c) as *const __m256i));
        let mut q = _mm512_and_si512(
            _mm512_mask_srli_epi16(z, 0xFFFF_0000, z, 4),
            _mm512_set1_epi8(0x0F),
        );
        if five {
            // Fifth bits: bit 2c of qh[l] (lower half), bit 2c + 1 (upper half).
            let sh = _mm512_mask_blend_epi16(
                0xFFFF_0000,
                _mm512_set1_epi16(2 * c as i16),
                _mm512_set1_epi16(2 * c as i16 + 1),
            );
            let h = _mm512_and_si512(_mm512_srlv_epi16(qh, sh), _mm512_set1_epi8(1));
            q = _mm512_or_si512(q, _mm512_slli_epi16(h, 4));
        }
        let sc = _mm512_mask_blend_epi16(
            0xFFFF_0000,
            _mm512_set1_epi16(sc8[2 * c] as i16),
            _mm512_set1_epi16(sc8[2 * c + 1] as i16),
        );
        (q, sc)
    }

    /// Repacked Q4_K rows of one row block decoded once for [`q4_k_gemm4`]: per block,
    /// each step's weights and scales as [`k45_step`] makes them, the minimums as
    /// [`k45_mins16`] spreads them, and `d`, `dmin` widened to f32. A prompt's groups of
    /// four activation rows all pass the same rows, so each block is unpacked once, not
    /// once per group.
    #[derive(Default)]
    pub(super) struct DecodedQ4K {
        /// (rows, nb, 4) steps' weights.
        q: Vec<Chunk>,
        /// (rows, nb, 4) steps' scales.
        sc: Vec<Chunk>,
        /// (rows, nb) minimums by 16-group.
        mn: Vec<Chunk>,
        /// (rows, nb) scales `d`, then (rows, nb) `dmin`.
        d: Vec<f32>,
        /// Blocks in a row.
        nb: usize,
    }

    impl DecodedQ4K {
        /// Bytes one decoded row of `nb` blocks takes.
        pub(super) const fn row_bytes(nb: usize) -> usize {
            nb * (9 * 64 + 8)
        }

        /// Decode `rows` (each `nb` Q4_K blocks), replacing what was held.
        ///
        /// # Safety
        /// [`available`]; every row is at least `nb` Q4_K blocks.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) unsafe fn fill<'a>(
            &mut self,
            rows: impl ExactSizeIterator<Item = &'a [u8]>,
            nb: usize,
        ) {
            let n = rows.len() * nb;
            self.nb = nb;
            let zero = Chunk([0; 64]);
            self.q.resize(4 * n, zero);
            self.sc.resize(4 * n, zero);
            self.mn.resize(n, zero);
            self.d.resize(2 * n, 0.0);
            for (r, row) in rows.enumerate() {
                for i in 0..nb {
                    let b = r * nb + i;
                    let blk = row.as_ptr().add(144 * i);
                    let scales = std::slice::from_raw_parts(blk.add(4), 12);
                    let (sc8, mn8) = k_scales_mins(scales);
                    let mn = self.mn.as_mut_ptr().add(b) as *mut __m512i;
                    _mm512_store_si512(mn, k45_mins16(&mn8));
                    for c in 0..4 {
                        let (q, sc) = k45_step(blk.add(16), _mm512_setzero_si512(), &sc8, c, false);
                        _mm512_store_si512(self.q.as_mut_ptr().add(4 * b + c) as *mut __m512i, q);
                        _mm512_store_si512(self.sc.as_mut_ptr().add(4 * b + c) as *mut __m512i, sc);
                    }
                    self.d[b] = super::avx2::f16p(blk);
                    self.d[n + b] = super::avx2::f16p(blk.add(2));
                }
            }
        }
    }

    /// Decoded row `r` of `dec` with four activation rows in llama.cpp's grouped order
    /// ([`KOrder::Gemm`]): [`q45_k_rows::<4>`]'s arithmetic for Q4_K in that order, from
    /// the decoded blocks, so each result equals it bit for bit.
    ///
    /// # Safety
    /// [`available`]; `dec` filled with Q4_K rows as long as the activations, each
    /// prepared as Q8_K.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn q4_k_gemm4(
        dec: &DecodedQ4K,
        r: usize,
        acts: [&QuantizedActs; 4],
    ) -> [f32; 4] {
        let nb = dec.nb;
        let n = dec.d.len() / 2;
        let (mut rows4, mut mins4) = (_mm_setzero_ps(), _mm_setzero_ps());
        for i in 0..nb {
            let b = r * nb + i;
            let mn16 = _mm512_load_si512(dec.mn.as_ptr().add(b) as *const __m512i);
            let mv: [__m512i; 4] = std::array::from_fn(|k| {
                let bs = _mm512_loadu_si512(acts[k].bsums.as_ptr().add(16 * i) as *const __m512i);
                _mm512_mullo_epi32(mn16, bs)
            });
            let dx4 = _mm_set_ps(acts[3].d[i], acts[2].d[i], acts[1].d[i], acts[0].d[i]);
            let sc4 = _mm_mul_ps(_mm_set1_ps(dec.d[b]), dx4);
            for c in 0..4 {
                let q = _mm512_load_si512(dec.q.as_ptr().add(4 * b + c) as *const __m512i);
                let sc = _mm512_load_si512(dec.sc.as_ptr().add(4 * b + c) as *const __m512i);
                let ps: [__m512i; 4] = std::array::from_fn(|k| {
                    let x = _mm512_loadu_si512(
                        acts[k].qs.as_ptr().add(256 * i + 64 * c) as *const __m512i
                    );
                    _mm512_madd_epi16(_mm512_maddubs_epi16(q, x), sc)
                });
                // Step c's four totals (lane k: row k) into the four chains.
                let t = fold_lanes(interleave4(ps[0], ps[1], ps[2], ps[3]));
                rows4 = _mm_fmadd_ps(_mm_cvtepi32_ps(t), sc4, rows4);
            }
            // The minimums' chains, step after step: 128-bit lane c of the interleaved
            // products holds step c's four sums.
            let mt = interleave4(mv[0], mv[1], mv[2], mv[3]);
            mins4 = min_steps(mt, _mm_mul_ps(_mm_set1_ps(dec.d[n + b]), dx4), mins4);
        }
        let mut out = [0.0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(rows4, mins4));
        out
    }

    /// The grouped order's minimum chains over one block: 128-bit lane c of `mt` holds
    /// step c's four minimum sums (lane k: row k), each converted and added to `mins4`
    /// scaled by `dm` (`dmin · dx` per row), step after step.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn min_steps(mt: __m512i, dm: __m128, mut mins4: __m128) -> __m128 {
        let lanes = [
            _mm512_castsi512_si128(mt),
            _mm512_extracti32x4_epi32(mt, 1),
            _mm512_extracti32x4_epi32(mt, 2),
            _mm512_extracti32x4_epi32(mt, 3),
        ];
        for m in lanes {
            mins4 = _mm_fmadd_ps(_mm_cvtepi32_ps(m), dm, mins4);
        }
        mins4
    }

    /// Four vectors' i32 lanes summed within each 128-bit lane and interleaved: 128-bit
    /// lane j of the result holds `[Σ a_j, Σ b_j, Σ c_j, Σ d_j]`, the sums of the four
    /// numbers in lane j of each (exact integers).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn interleave4(a: __m512i, b: __m512i, c: __m512i, d: __m512i) -> __m512i {
        let ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        let cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
        _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd))
    }

    /// The four 128-bit lanes of `u` added: with [`interleave4`], lane k of the result is
    /// vector k's total.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn fold_lanes(u: __m512i) -> __m128i {
        let v = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
        _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))
    }

    /// Q6_K, 64 numbers (four groups of 16) a step, unsigned q (0..63) in `vpmaddubsw`
    /// pairs (no saturation) and `vpmaddwd` with the groups' i8 scales; the `− 32` of
    /// every q enters as `− 32 · Σ_g sc_g · Σ_{i∈g} qx_i` (the stored 16-sums). As in
    /// [`q45_k`], the i32 lanes and the f32 arithmetic are the AVX2 kernel's: the results
    /// equal it bit for bit.
    ///
    /// # Safety
    /// [`available`]; `row` and `a` checked by [`check_dot`] for this type.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn q6_k(row: &[u8], a: &QuantizedActs, tiled: bool) -> f32 {
        q6_k_rows::<1>(row, [a], tiled)[0]
    }

    /// [`q6_k`] of one weight row with `RA` activation rows: each weight step decoded
    /// once for all of them, each row's arithmetic exactly [`q6_k`]'s (so each result
    /// equals it bit for bit).
    ///
    /// # Safety
    /// As [`q6_k`]'s, for every row of `acts`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn q6_k_rows<const RA: usize>(
        row: &[u8],
        acts: [&QuantizedActs; RA],
        tiled: bool,
    ) -> [f32; RA] {
        let mut chain = [0.0f32; RA];
        let m4 = _mm512_set1_epi8(0x0F);
        let m30 = _mm512_set1_epi8(0x30);
        // Word shifts that bring qh's bit pair k to bits 4..6 of each byte: k = 0, 1 in
        // the low and high 256-bit halves of the first step, k = 2, 3 in the second.
        let left = _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
        let right =
            _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_setzero_si512(), _mm512_set1_epi16(2));
        let mut acc = [_mm256_setzero_ps(); RA];
        for i in 0..acts[0].d.len() {
            let blk = row.as_ptr().add(210 * i);
            let dw = super::avx2::f16p(blk.add(208));
            // The 16 scales as words; group g's scale sits in the 8 words of its 16 numbers.
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192) as *const __m128i));
            let sc16 = _mm512_castsi256_si512(sc16);
            let sc32 = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(192) as *const __m128i));
            let mut sumi = [_mm512_setzero_si512(); RA];
            for n in 0..2 {
                let l = _mm512_loadu_si512(blk.add(64 * n) as *const __m512i);
                let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    blk.add(128 + 32 * n) as *const __m256i
                ));
                let q = [
                    _mm512_or_si512(
                        _mm512_and_si512(l, m4),
                        _mm512_and_si512(_mm512_sllv_epi16(qh, left), m30),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                        _mm512_and_si512(_mm512_srlv_epi16(qh, right), m30),
                    ),
                ];
                for (h, qk) in q.iter().enumerate() {
                    // Numbers 128n + 64h .. +64: groups 8n + 4h .. +4, 8 words each.
                    let g0 = (8 * n + 4 * h) as i16;
                    let idx = _mm512_add_epi16(
                        _mm512_set1_epi16(g0),
                        _mm512_srli_epi16(
                            _mm512_set_epi16(
                                31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15,
                                14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
                            ),
                            3,
                        ),
                    );
                    let sc = _mm512_permutexvar_epi16(idx, sc16);
                    for (a, si) in acts.iter().zip(sumi.iter_mut()) {
                        let x = _mm512_loadu_si512(
                            a.qs.as_ptr().add(256 * i + 128 * n + 64 * h) as *const __m512i
                        );
                        let p = _mm512_madd_epi16(_mm512_maddubs_epi16(*qk, x), sc);
                        *si = _mm512_add_epi32(*si, p);
                    }
                }
            }
            for k in 0..RA {
                let d = dw * acts[k].d[i];
                let bsums =
                    _mm512_loadu_si512(acts[k].bsums.as_ptr().add(16 * i) as *const __m512i);
                // Lane k of the offsets: groups 2k and 2k + 1 (llama.cpp's q8sclsub / 32).
                let v = _mm512_mullo_epi32(sc32, bsums);
                let off = _mm512_cvtepi64_epi32(_mm512_add_epi32(v, _mm512_srli_epi64(v, 32)));
                let s = _mm256_add_epi32(
                    _mm512_castsi512_si256(sumi[k]),
                    _mm512_extracti64x4_epi64(sumi[k], 1),
                );
                let s = _mm256_sub_epi32(s, _mm256_slli_epi32(off, 5));
                if tiled {
                    let t = super::avx2::hsum_epi32(s) as f32;
                    chain[k] = (dw * t).mul_add(acts[k].d[i], chain[k]);
                } else {
                    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[k]);
                }
            }
        }
        if tiled {
            return chain;
        }
        std::array::from_fn(|k| super::avx2::hsum_ps(acc[k]))
    }

    /// How many tiles ahead [`tile`] prefetches the weights it will read next.
    const PREFETCH_TILES: usize = 4;

    /// Dots of `RW` weight rows of type `K` with one activation row (a decoded token's
    /// product): the contract of [`super::avx2::tile`], for blocks in pairs (16 i32
    /// lanes: 8 per block), scales in groups of 16 blocks.
    ///
    /// Every result equals the AVX2 path's bit for bit: each block's eight i32 lane sums
    /// are the same integers (lane k sums numbers 4k..4k+4), and they meet their scales
    /// in the same FMAs in the same order (one chain, block after block), then the same
    /// horizontal sum and, for the kinds with a minimum, the same `Σ m·s` chain. So a
    /// machine with VNNI and one without compute the same numbers.
    ///
    /// Unlike the AVX2 kernel it reads the blocks' scales (and minimums) from the blocks
    /// themselves, 16 at a time, not from the f32 table: the table is a third more bytes
    /// to stream for Q4_1, and decode waits on memory. `_scales` is not read (it is there
    /// so both kernels have one signature). Several activation rows (a prompt) go
    /// through [`paired_tile`] instead.
    ///
    /// # Safety
    /// [`available`]; every row is `acts[0].len` numbers of type `K` and `acts[0]`
    /// prepared as Q8_0 of the same length.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn tile<const K: u8, const RW: usize>(
        rows: [&[u8]; RW],
        _scales: [&[f32]; RW],
        acts: [&QuantizedActs; 1],
        out: &mut [[f32; 1]; RW],
    ) {
        const { assert!(RW <= 4, "one lane of `mins` per weight row") };
        let a = acts[0];
        let nb = a.d.len();
        let (.., has_min) = layout(dtype(K));
        let mut acc = [_mm256_setzero_ps(); RW];
        // The kinds with a minimum: lane w holds weight row w's chain Σ_i fma(m_w,i, s_i, e).
        let mut mins = _mm_setzero_ps();
        // sc[w][jj]: the product d_w · dx of the group's block g + jj (zero past the end),
        // read by the FMAs as a broadcast from memory.
        let mut sc = [[0.0f32; 16]; RW];
        let mut g = 0;
        while g < nb {
            let n = (nb - g).min(16);
            let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
            let (dw, mw) = group_scales::<K, RW>(rows, g, m);
            let dx = _mm512_maskz_loadu_ps(m, a.d.as_ptr().add(g));
            for w in 0..RW {
                _mm512_storeu_ps(sc[w].as_mut_ptr(), _mm512_mul_ps(dw[w], dx));
            }
            // Block jj's minimums of the four rows (zero for w ≥ RW) at
            // 16 (jj % 4) + 4 (jj / 4), for the chains' FMAs among the pairs' work.
            let ms = if has_min {
                transpose_4x16(std::array::from_fn(|w| {
                    if w < RW {
                        mw[w]
                    } else {
                        _mm512_setzero_ps()
                    }
                }))
            } else {
                [0.0; 64]
            };
            let mut j = 0;
            while j + 2 <= n {
                pair::<K, true, RW>(rows, a, &sc, &ms, g, j, &mut acc, &mut mins);
                j += 2;
            }
            if j < n {
                pair::<K, false, RW>(rows, a, &sc, &ms, g, j, &mut acc, &mut mins);
            }
            g += 16;
        }
        // avx2::tile's ending (llama.cpp's): the 8 lanes summed, then Σ m·s for the kinds
        // with a minimum.
        let mut e = [0.0f32; 4];
        _mm_storeu_ps(e.as_mut_ptr(), mins);
        for w in 0..RW {
            out[w][0] = super::avx2::hsum_ps(acc[w]) + e[w];
        }
    }

    /// A decoded token's activations spread for [`pair_tile`]: block `i`'s 32 numbers
    /// as 16 i32 lanes where lane `m` holds the four numbers of the block's lane `m / 2`
    /// (each lane twice: once for each weight row of a pair), and, for the kinds with an
    /// offset `o`, the lanes' starting sums `−o · Σ qx`. Filled once per product's task,
    /// into storage each thread keeps.
    #[derive(Default)]
    pub(super) struct Spread {
        /// Per block: the activations, lanes doubled.
        x: Vec<__m512i>,
        /// Per block (kinds with an offset; else empty): `−o · Σ qx` per lane.
        start: Vec<__m512i>,
    }

    impl Spread {
        /// `a` (prepared as Q8_0) spread for the weight type `K`, replacing what was
        /// held (the storage is reused).
        ///
        /// # Safety
        /// [`available`]; `a` holds whole 32-blocks (`a.qs.len() == 32 · a.d.len()`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) unsafe fn fill<const K: u8>(&mut self, a: &QuantizedActs) {
            let (.., o, _) = layout(dtype(K));
            let nb = a.d.len();
            let twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
            self.x.clear();
            self.start.clear();
            for i in 0..nb {
                let b = _mm256_loadu_si256(a.qs.as_ptr().add(32 * i) as *const __m256i);
                let v = _mm512_permutexvar_epi32(twice, _mm512_castsi256_si512(b));
                self.x.push(v);
                if o != 0 {
                    let z = _mm512_setzero_si512();
                    self.start.push(_mm512_sub_epi32(
                        z,
                        _mm512_dpbusd_epi32(z, _mm512_set1_epi8(o), v),
                    ));
                }
            }
        }
    }

    /// The unsigned weights `u = q + o` of the same block of two weight rows (`a`, `b`
    /// point at the blocks) for [`pair_tile`]: i32 lane `m` holds the four numbers of
    /// lane `m / 2` of row `a` (even `m`) or `b` (odd `m`), so one `vpdpbusd` with
    /// [`Spread`] activations gives both rows' eight lane sums, interleaved.
    ///
    /// For the nibble kinds, one GFNI affine byte transform takes the low nibbles to
    /// lanes 0..8 and the high nibbles to lanes 8..16.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,bmi2,gfni")]
    unsafe fn pair_weights<const K: u8>(a: *const u8, b: *const u8) -> __m512i {
        let (_, qs, qh, _, _) = layout(dtype(K));
        if K == Q8_0 {
            let za = _mm512_castsi256_si512(_mm256_loadu_si256(a.add(qs) as *const __m256i));
            let zb = _mm512_castsi256_si512(_mm256_loadu_si256(b.add(qs) as *const __m256i));
            let idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
            let z = _mm512_permutex2var_epi32(za, idx, zb);
            return _mm512_xor_si512(z, _mm512_set1_epi8(-128));
        }
        // Lanes 0..8: the low nibbles of both rows' quant bytes, four bytes of `a`, four
        // of `b`, ... (numbers 0..16); lanes 8..16 the same bytes' high nibbles (16..32).
        let za = _mm512_castsi128_si512(_mm_loadu_si128(a.add(qs) as *const __m128i));
        let zb = _mm512_castsi128_si512(_mm_loadu_si128(b.add(qs) as *const __m128i));
        let idx = _mm512_set_epi32(19, 3, 18, 2, 17, 1, 16, 0, 19, 3, 18, 2, 17, 1, 16, 0);
        // Bit matrices (output bit i from byte 7 − i's row): x & 0x0F in the low four
        // 64-bit lanes, x >> 4 in the high four.
        let (low, high) = (0x0102_0408_0000_0000i64, 0x1020_4080_0000_0000i64);
        let m = _mm512_set_epi64(high, high, high, high, low, low, low, low);
        let mut z = _mm512_gf2p8affine_epi64_epi8::<0>(_mm512_permutex2var_epi32(za, idx, zb), m);
        if let Some(h) = qh {
            // Byte 8k + j holds number 4k + j of `a`, byte 8k + 4 + j that of `b`: the
            // fifth bits spread four at a time.
            let ha = std::ptr::read_unaligned(a.add(h) as *const u32) as u64;
            let hb = std::ptr::read_unaligned(b.add(h) as *const u32) as u64;
            let bits = _pdep_u64(ha, 0x0F0F_0F0F_0F0F_0F0F) | _pdep_u64(hb, 0xF0F0_F0F0_F0F0_F0F0);
            z = _mm512_mask_add_epi8(z, bits, z, _mm512_set1_epi8(0x10));
        }
        z
    }

    /// Dots of four weight rows of type `K` (two pairs, back to back in memory) with one
    /// activation row, spread as [`Spread`]: a decoded token's product. Each pair's
    /// blocks meet in one register (lanes interleaved: [`pair_weights`]), so a block of
    /// two rows costs one `vpdpbusd`, one conversion and one 512-bit FMA, the scales of
    /// both rows broadcast as one 64-bit pair.
    ///
    /// Every lane's arithmetic is [`tile`]'s: the same i32 lane sums, met by the same
    /// scale products `d_w · dx` in the same FMAs block after block, then the same
    /// horizontal sum of each row's eight lanes and the same `Σ m·s` chain. So the
    /// results equal `tile`'s (and the AVX2 kernel's) bit for bit.
    ///
    /// It prefetches the tiles that follow its rows in memory (a matrix's next rows).
    ///
    /// # Safety
    /// [`pairs_available`]; every row is `a.len` numbers of type `K`, `a` prepared as
    /// Q8_0 of the same length, and `sp` spread from `a` for `K`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,bmi2,gfni")]
    pub(super) unsafe fn pair_tile<const K: u8>(
        rows: [&[u8]; 4],
        a: &QuantizedActs,
        sp: &Spread,
        out: &mut [f32; 4],
    ) {
        let (bb, .., o, has_min) = layout(dtype(K));
        let nb = a.d.len();
        // Pair p (rows 2p, 2p + 1), lanes interleaved.
        let mut acc = [_mm512_setzero_ps(); 2];
        // The kinds with a minimum: lane w holds weight row w's chain Σ_i fma(m_w,i, s_i, e).
        let mut mins = _mm_setzero_ps();
        // scp[p][2jj], scp[p][2jj + 1]: the products d_w · dx of block g + jj of pair p's
        // two rows, read by one 64-bit broadcast.
        let mut scp = [[0.0f32; 32]; 2];
        let lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        let hi_idx = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
        // The tiles ahead, prefetched over this tile's blocks (a hint; past the matrix's
        // end it reads nothing, and the address is never dereferenced).
        let ahead = rows[0]
            .as_ptr()
            .wrapping_add(PREFETCH_TILES * 4 * rows[0].len());
        let lines = (4 * bb).div_ceil(64);
        let mut g = 0;
        while g < nb {
            let n = (nb - g).min(16);
            let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
            let mut ms = [0.0f32; 64];
            if n < 16 {
                // A short group (a row's last): block by block, which costs a few
                // instructions a block instead of the whole group's gathers and
                // transposes (Q4_1 576 columns: 19.7 → 23.9 GB/s in L2).
                for jj in 0..n {
                    short_scales::<K>(rows, bb * (g + jj), a.d[g + jj], jj, &mut scp, &mut ms);
                }
            } else {
                let (dw, mw) = group_scales::<K, 4>(rows, g, m);
                let dx = _mm512_maskz_loadu_ps(m, a.d.as_ptr().add(g));
                for (p, sc) in scp.iter_mut().enumerate() {
                    let s0 = _mm512_mul_ps(dw[2 * p], dx);
                    let s1 = _mm512_mul_ps(dw[2 * p + 1], dx);
                    _mm512_storeu_ps(sc.as_mut_ptr(), _mm512_permutex2var_ps(s0, lo_idx, s1));
                    _mm512_storeu_ps(
                        sc.as_mut_ptr().add(16),
                        _mm512_permutex2var_ps(s0, hi_idx, s1),
                    );
                }
                if has_min {
                    ms = block_major_4x16(mw);
                }
            }
            for jj in 0..n {
                let i = g + jj;
                for c in 0..lines {
                    let p = ahead.wrapping_add(4 * bb * i + 64 * c);
                    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
                }
                if has_min {
                    let mv = _mm_loadu_ps(ms.as_ptr().add(4 * jj));
                    mins = _mm_fmadd_ps(mv, _mm_set1_ps(*a.sum.get_unchecked(i)), mins);
                }
                let x = *sp.x.get_unchecked(i);
                let start = if o != 0 {
                    *sp.start.get_unchecked(i)
                } else {
                    _mm512_setzero_si512()
                };
                for (p, sc) in scp.iter().enumerate() {
                    let q = pair_weights::<K>(
                        rows[2 * p].as_ptr().add(bb * i),
                        rows[2 * p + 1].as_ptr().add(bb * i),
                    );
                    let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q, x));
                    let pair = std::ptr::read_unaligned(sc.as_ptr().add(2 * jj) as *const f64);
                    let scale = _mm512_castpd_ps(_mm512_set1_pd(pair));
                    acc[p] = _mm512_fmadd_ps(scale, s, acc[p]);
                }
            }
            g += 16;
        }
        // Each row's eight lanes gathered (even lanes: the pair's first row), then
        // tile's ending.
        let split = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
        let mut e = [0.0f32; 4];
        _mm_storeu_ps(e.as_mut_ptr(), mins);
        for (p, acc) in acc.iter().enumerate() {
            let v = _mm512_permutexvar_ps(split, *acc);
            out[2 * p] = super::avx2::hsum_ps(lo(v)) + e[2 * p];
            out[2 * p + 1] = super::avx2::hsum_ps(hi(v)) + e[2 * p + 1];
        }
    }

    /// One block's scales for [`pair_tile`], the four rows at once: block `jj` of the
    /// group, whose bytes start at `at` in each row, with the activations' scale `dx`.
    /// Writes the products `d_w · dx` into the pairs' `scp` and the minimums into `ms`
    /// (block-major), the same numbers as the whole group's path.
    ///
    /// # Safety
    /// [`available`]; each row holds a block of type `K` at `at`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn short_scales<const K: u8>(
        rows: [&[u8]; 4],
        at: usize,
        dx: f32,
        jj: usize,
        scp: &mut [[f32; 32]; 2],
        ms: &mut [f32; 64],
    ) {
        let has_min = layout(dtype(K)).4;
        // The block's first four bytes: d and m (or d and two quant bytes, unused).
        let first = |w: usize| std::ptr::read_unaligned(rows[w].as_ptr().add(at) as *const i32);
        let h = _mm_set_epi32(first(3), first(2), first(1), first(0));
        // [d0 m0 d1 m1 d2 m2 d3 m3] → [d0 d1 d2 d3 | m0 m1 m2 m3]
        let pick = _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0);
        let dm = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(h), pick);
        let d = _mm_castps_pd(_mm_mul_ps(_mm256_castps256_ps128(dm), _mm_set1_ps(dx)));
        _mm_storel_pd(scp[0].as_mut_ptr().add(2 * jj) as *mut f64, d);
        _mm_storeh_pd(scp[1].as_mut_ptr().add(2 * jj) as *mut f64, d);
        if has_min {
            _mm_storeu_ps(ms.as_mut_ptr().add(4 * jj), _mm256_extractf128_ps(dm, 1));
        }
    }

    /// The scales `d` (and, for the kinds with one, the minimums `m`) of blocks
    /// `g .. g + 16` of every row, widened from the f16s at the blocks' starts (the
    /// scale table's values, read from the bytes the kernels stream anyway); zero for the
    /// blocks past the row's end (`m` masks the group) and `m` zero for the kinds without
    /// a minimum.
    ///
    /// # Safety
    /// [`available`]; the masked blocks lie within each row of type `K`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn group_scales<const K: u8, const RW: usize>(
        rows: [&[u8]; RW],
        g: usize,
        m: u16,
    ) -> ([__m512; RW], [__m512; RW]) {
        let (bb, .., has_min) = layout(dtype(K));
        // Byte offsets of 16 consecutive blocks.
        let offs = _mm512_mullo_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32(bb as i32),
        );
        let mut d = [_mm512_setzero_ps(); RW];
        let mut mn = [_mm512_setzero_ps(); RW];
        for w in 0..RW {
            let base = rows[w].as_ptr().add(bb * g) as *const i32;
            let h = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), m, offs, base);
            d[w] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
            if has_min {
                // The minimums are the f16s right after the scales: the words' upper halves.
                mn[w] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
            }
        }
        (d, mn)
    }

    /// One group of `n` blocks from `g` of the minimum chains of [`paired_tile`]: for each block
    /// `i` in order, lane `a` of `e[w]` becomes `fma(m_w,i, s_a,i, e)`, with `mw[w]` the
    /// group's minimums of weight row `w` (widened by the caller) and `s_a` activation row
    /// `a`'s block sums. The sums are transposed once per group (block `i`'s four rows in
    /// one 128-bit lane), so each block costs one FMA per weight row.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn min_chain<const RW: usize, const RA: usize>(
        mut e: [__m128; RW],
        mw: &[__m512; RW],
        acts: [&QuantizedActs; RA],
        g: usize,
        n: usize,
        m: u16,
    ) -> [__m128; RW] {
        // sa[a]: row a's sums of the group's blocks (zero past the end and for a ≥ RA).
        let sa: [__m512; 4] = std::array::from_fn(|a| {
            if a < RA {
                _mm512_maskz_loadu_ps(m, acts[a].sum.as_ptr().add(g))
            } else {
                _mm512_setzero_ps()
            }
        });
        // Block i's four rows' sums at 16 (i % 4) + 4 (i / 4).
        let us = transpose_4x16(sa);
        let mut ms = [[0.0f32; 16]; RW];
        for w in 0..RW {
            _mm512_storeu_ps(ms[w].as_mut_ptr(), mw[w]);
        }
        // Block i indexes the transposed sums and every weight row's minimums.
        #[allow(clippy::needless_range_loop)]
        for i in 0..n {
            let sv = _mm_loadu_ps(us.as_ptr().add(16 * (i % 4) + 4 * (i / 4)));
            for w in 0..RW {
                e[w] = _mm_fmadd_ps(_mm_set1_ps(ms[w][i]), sv, e[w]);
            }
        }
        e
    }

    /// The four rows of 16 numbers `v` unpacked so that register `r`'s 128-bit lane `l`
    /// holds column `4 l + r` (its four numbers, row by row).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn unpack_4x16(v: [__m512; 4]) -> [__m512; 4] {
        let t0 = _mm512_unpacklo_ps(v[0], v[1]);
        let t1 = _mm512_unpackhi_ps(v[0], v[1]);
        let t2 = _mm512_unpacklo_ps(v[2], v[3]);
        let t3 = _mm512_unpackhi_ps(v[2], v[3]);
        let pd = _mm512_castps_pd;
        [
            _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t0), pd(t2))),
            _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t0), pd(t2))),
            _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t1), pd(t3))),
            _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t1), pd(t3))),
        ]
    }

    /// The 4 × 16 numbers `v` (four rows of 16) column by column, in the order that
    /// puts column `i`'s four numbers at `16 (i % 4) + 4 (i / 4)`: one 128-bit lane of
    /// the unpacked registers.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn transpose_4x16(v: [__m512; 4]) -> [f32; 64] {
        let u = unpack_4x16(v);
        let mut out = [0.0f32; 64];
        for (r, x) in u.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(16 * r), *x);
        }
        out
    }

    /// The 4 × 16 numbers `v` (four rows of 16) column by column: column `i`'s four
    /// numbers at `4 i`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn block_major_4x16(v: [__m512; 4]) -> [f32; 64] {
        // u[r]'s 128-bit lane l: column 4 l + r.
        let u = unpack_4x16(v);
        // The 128-bit lanes transposed: register l holds lane l of u[0..4], columns
        // 4 l .. 4 l + 4 in order.
        let w01 = _mm512_shuffle_f32x4::<0b01_00_01_00>(u[0], u[1]);
        let w23 = _mm512_shuffle_f32x4::<0b01_00_01_00>(u[2], u[3]);
        let x01 = _mm512_shuffle_f32x4::<0b11_10_11_10>(u[0], u[1]);
        let x23 = _mm512_shuffle_f32x4::<0b11_10_11_10>(u[2], u[3]);
        let c = [
            _mm512_shuffle_f32x4::<0b10_00_10_00>(w01, w23),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(w01, w23),
            _mm512_shuffle_f32x4::<0b10_00_10_00>(x01, x23),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(x01, x23),
        ];
        let mut out = [0.0f32; 64];
        for (l, x) in c.iter().enumerate() {
            _mm512_storeu_ps(out.as_mut_ptr().add(16 * l), *x);
        }
        out
    }

    /// One 32-block of activations quantised as [`super::quantize_activations`] does
    /// (`q` into `qb`, f16-rounded `dx` and `dx · Σq` pushed onto `d` and `sum`), 16
    /// numbers a step. Returns false, touching nothing, for a block with a NaN or an
    /// infinity: the scalar twin then takes it (its rules for those differ from what
    /// the vector conversions would give).
    ///
    /// # Safety
    /// [`available`]; `xb` and `qb` hold 32 numbers.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn quantize_q8_0(
        xb: &[f32],
        qb: &mut [i8],
        d: &mut Vec<f32>,
        sum: &mut Vec<f32>,
    ) -> bool {
        let v = [
            _mm512_loadu_ps(xb.as_ptr()),
            _mm512_loadu_ps(xb.as_ptr().add(16)),
        ];
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
        // (A scale past f32's range, from a subnormal maximum, is the twin's too.)
        if !amax.is_finite()
            || (amax != 0.0 && !(127.0 / amax).is_finite())
            || _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v[0], v[1]) != 0
        {
            return false;
        }
        let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let mut sq = _mm512_setzero_si512();
        for (k, vk) in v.iter().enumerate() {
            let q = round_clamp(_mm512_mul_ps(*vk, id));
            sq = _mm512_add_epi32(sq, q);
            _mm_storeu_si128(
                qb.as_mut_ptr().add(16 * k) as *mut __m128i,
                _mm512_cvtepi32_epi8(q),
            );
        }
        let dx = amax / 127.0;
        d.push(f16::from_f32(dx).to_f32());
        sum.push(f16::from_f32(dx * _mm512_reduce_add_epi32(sq) as f32).to_f32());
        true
    }

    /// One 256-block of activations quantised as [`super::quantize_activations`] does for
    /// the K-quants (`q` into `qb`, `dx` onto `d`, the 16 group sums onto `bsums`), one
    /// group of 16 a step. Returns false, touching nothing, for a block with a NaN or an
    /// infinity (the scalar twin takes it).
    ///
    /// # Safety
    /// [`available`]; `xb` and `qb` hold 256 numbers.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn quantize_q8_k(
        xb: &[f32],
        qb: &mut [i8],
        d: &mut Vec<f32>,
        bsums: &mut Vec<i32>,
    ) -> bool {
        let v: [__m512; 16] = std::array::from_fn(|g| _mm512_loadu_ps(xb.as_ptr().add(16 * g)));
        let mut m = _mm512_setzero_ps();
        let mut nan = 0u16;
        for vg in &v {
            m = _mm512_max_ps(m, _mm512_abs_ps(*vg));
            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(*vg, *vg);
        }
        let amax = _mm512_reduce_max_ps(m);
        if !amax.is_finite() || nan != 0 {
            return false;
        }
        if amax == 0.0 {
            d.push(0.0);
            bsums.extend([0; QK_K / 16]);
            return true; // qb stays zero
        }
        // The first number of largest magnitude, sign kept (the twin's strict `>`).
        let mut max = 0.0f32;
        for (g, vg) in v.iter().enumerate() {
            let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(*vg), _mm512_set1_ps(amax));
            if hit != 0 {
                max = xb[16 * g + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        if !iscale.is_finite() {
            return false; // a subnormal maximum: the twin's
        }
        for (g, vg) in v.iter().enumerate() {
            let q = round_clamp(_mm512_mul_ps(_mm512_set1_ps(iscale), *vg));
            bsums.push(_mm512_reduce_add_epi32(q));
            _mm_storeu_si128(
                qb.as_mut_ptr().add(16 * g) as *mut __m128i,
                _mm512_cvtepi32_epi8(q),
            );
        }
        d.push(1.0 / iscale);
        true
    }

    /// Round to the nearest integer, ties to even (the conversion's default mode, as the
    /// twin's `round_even`), clamped to [−127, 127].
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn round_clamp(x: __m512) -> __m512i {
        let q = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
        _mm512_max_epi32(
            _mm512_min_epi32(q, _mm512_set1_epi32(127)),
            _mm512_set1_epi32(-127),
        )
    }

    /// 64 bytes, aligned as a 512-bit register: the unit of [`Paired`].
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    pub(super) struct Chunk([u8; 64]);

    /// Two activation rows prepared for [`paired_tile`], block by block: the two rows'
    /// 8-bit numbers side by side (row one's 32, then row two's), the `−o · Σ qx` start of
    /// each i32 lane for the weight type's offset `o`, and each lane's `dx` (eight lanes of
    /// row one's block scale, eight of row two's). Made once per product, read by every
    /// weight row.
    pub(super) struct Paired {
        chunks: Vec<Chunk>,
    }

    impl Paired {
        /// The pair (`a`, `b`), both prepared as Q8_0 of one length, for weights of type
        /// `K`.
        pub(super) fn new<const K: u8>(a: &QuantizedActs, b: &QuantizedActs) -> Paired {
            // SAFETY: only called after available() said yes (QMatrix::prefill_paired).
            unsafe { Paired::build::<K>(a, b) }
        }

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn build<const K: u8>(a: &QuantizedActs, b: &QuantizedActs) -> Paired {
            let nb = a.d.len();
            let (.., o, _) = layout(dtype(K));
            let mut chunks = vec![Chunk([0; 64]); 3 * nb];
            for j in 0..nb {
                let x = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256(
                        a.qs.as_ptr().add(32 * j) as *const __m256i
                    )),
                    _mm256_loadu_si256(b.qs.as_ptr().add(32 * j) as *const __m256i),
                    1,
                );
                let start = _mm512_sub_epi32(
                    _mm512_setzero_si512(),
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(o), x),
                );
                let dx =
                    _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a.d[j]), _mm512_set1_ps(b.d[j]));
                let c = chunks.as_mut_ptr().add(3 * j) as *mut __m512i;
                _mm512_store_si512(c, x);
                _mm512_store_si512(c.add(1), start);
                _mm512_store_ps(c.add(2) as *mut f32, dx);
            }
            Paired { chunks }
        }
    }

    /// 32 bytes, aligned as a 256-bit register: one block's decoded weights in [`Decoded`].
    #[derive(Clone, Copy)]
    #[repr(C, align(32))]
    struct Half([u8; 32]);

    /// Weight rows of one row block decoded once for [`paired_tile`]: per block, the 32
    /// unsigned weights `u = q + o` in number order, the scale `d` and (for the kinds with
    /// one) the minimum `m` widened to f32. A prompt's activation pairs all pass the same
    /// rows, so decoding each block once, not once per pair, takes the nibble unpacking
    /// and the scale conversions out of the kernel's inner loop.
    #[derive(Default)]
    pub(super) struct Decoded {
        /// (rows, nb) blocks of weights.
        u: Vec<Half>,
        /// (rows, nb) scales.
        d: Vec<f32>,
        /// (rows, nb) minimums (zero for the kinds without).
        m: Vec<f32>,
        /// Blocks in a row.
        nb: usize,
    }

    impl Decoded {
        /// Bytes one decoded row of `nb` blocks takes.
        pub(super) const fn row_bytes(nb: usize) -> usize {
            nb * (32 + 4 + 4)
        }

        /// Decode `rows` (each `nb` blocks of type `K`), replacing what was held.
        ///
        /// # Safety
        /// [`available`]; every row is at least `nb` blocks of type `K`.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) unsafe fn fill<'a, const K: u8>(
            &mut self,
            rows: impl ExactSizeIterator<Item = &'a [u8]>,
            nb: usize,
        ) {
            let bb = layout(dtype(K)).0;
            let n = rows.len() * nb;
            self.nb = nb;
            self.u.resize(n, Half([0; 32]));
            self.d.resize(n, 0.0);
            self.m.resize(n, 0.0);
            for (r, row) in rows.enumerate() {
                let b = row.as_ptr();
                let u = self.u.as_mut_ptr().add(r * nb) as *mut __m256i;
                let mut j = 0;
                while j + 2 <= nb {
                    // Two blocks' 64 weights, block j's then block j + 1's.
                    _mm512_storeu_si512(
                        u.add(j) as *mut __m512i,
                        weights::<K, true>(b.add(bb * j)),
                    );
                    j += 2;
                }
                if j < nb {
                    let z = weights::<K, false>(b.add(bb * j));
                    _mm256_store_si256(u.add(j), _mm512_castsi512_si256(z));
                }
                // The scales and minimums (zero without), sixteen blocks at a time.
                for g in (0..nb).step_by(16) {
                    let n = (nb - g).min(16);
                    let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
                    let ([d], [mn]) = group_scales::<K, 1>([row], g, m);
                    _mm512_mask_storeu_ps(self.d.as_mut_ptr().add(r * nb + g), m, d);
                    _mm512_mask_storeu_ps(self.m.as_mut_ptr().add(r * nb + g), m, mn);
                }
            }
        }
    }

    /// Dots of `RW` decoded weight rows of type `K` (`rows[w]` indexes `dec`) with `PA`
    /// [`Paired`] activation row pairs (`RA` = 2·PA rows, `acts` the same rows, for their
    /// block sums): each weight block, loaded once into both halves of a register, meets
    /// all `RA` rows, and one 512-bit FMA advances two rows' chains (row one's eight
    /// lanes below, row two's above) by one block.
    ///
    /// Every result equals [`tile`]'s (and so the AVX2 kernel's and the twin's) bit for
    /// bit: each block's eight i32 lane sums are the same integers, scaled by the same
    /// `d_w · dx` product in the same block order, and the lanes meet the same horizontal
    /// sum and minimum chain.
    ///
    /// # Safety
    /// [`available`]; `dec` holds rows of type `K` (filled by [`Decoded::fill::<K>`]) as
    /// long as `acts[0]`, every `acts[j]` prepared as Q8_0 of that length, and `pairs[p]`
    /// made by [`Paired::new::<K>`] from `acts[2p]` and `acts[2p + 1]`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn paired_tile<
        const K: u8,
        const RW: usize,
        const PA: usize,
        const RA: usize,
    >(
        dec: &Decoded,
        rows: [usize; RW],
        pairs: [&Paired; PA],
        acts: [&QuantizedActs; RA],
        out: &mut [[f32; RA]; RW],
    ) {
        const {
            assert!(
                RA == 2 * PA && RA <= 4,
                "two activation rows per pair, at most four"
            )
        };
        let nb = dec.nb;
        let (.., o, has_min) = layout(dtype(K));
        let u: [*const __m256i; RW] =
            std::array::from_fn(|w| dec.u.as_ptr().add(rows[w] * nb) as *const __m256i);
        let d: [*const f32; RW] = std::array::from_fn(|w| dec.d.as_ptr().add(rows[w] * nb));
        let mut acc = [[_mm512_setzero_ps(); PA]; RW];
        let mut mins = [_mm_setzero_ps(); RW];
        let mut g = 0;
        while g < nb {
            let n = (nb - g).min(16);
            if has_min {
                let m = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
                let mw = std::array::from_fn(|w| {
                    _mm512_maskz_loadu_ps(m, dec.m.as_ptr().add(rows[w] * nb + g))
                });
                mins = min_chain::<RW, RA>(mins, &mw, acts, g, n, m);
            }
            for j in g..g + n {
                let q: [__m512i; RW] =
                    std::array::from_fn(|w| _mm512_broadcast_i64x4(_mm256_load_si256(u[w].add(j))));
                for p in 0..PA {
                    let c = pairs[p].chunks.as_ptr().add(3 * j) as *const __m512i;
                    let x = _mm512_load_si512(c);
                    let start = if o != 0 {
                        _mm512_load_si512(c.add(1))
                    } else {
                        _mm512_setzero_si512()
                    };
                    let dx = _mm512_load_ps(c.add(2) as *const f32);
                    for w in 0..RW {
                        let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[w], x));
                        let sc = _mm512_mul_ps(_mm512_set1_ps(*d[w].add(j)), dx);
                        acc[w][p] = _mm512_fmadd_ps(sc, s, acc[w][p]);
                    }
                }
            }
            g += 16;
        }
        for w in 0..RW {
            let mut e = [0.0f32; 4];
            _mm_storeu_ps(e.as_mut_ptr(), mins[w]);
            for p in 0..PA {
                out[w][2 * p] = super::avx2::hsum_ps(lo(acc[w][p])) + e[2 * p];
                out[w][2 * p + 1] = super::avx2::hsum_ps(hi(acc[w][p])) + e[2 * p + 1];
            }
        }
    }

    /// The kernels of type `K` for [`QMatrix::tile_rows`]: 4 × 1 and 1 × 1. No 1 × 4:
    /// with AVX-512, several activation rows go through [`paired_tile`] instead, so
    /// `tile_rows` only ever sees one.
    pub(super) fn tiles<const K: u8>() -> (Tile<4, 1>, Option<Tile<1, 4>>, Tile<1, 1>) {
        (tile::<K, 4>, None, tile::<K, 1>)
    }

    /// The low 8 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn lo(v: __m512) -> __m256 {
        _mm512_castps512_ps256(v)
    }

    /// The high 8 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn hi(v: __m512) -> __m256 {
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
    }

    /// Blocks `g + j` and (when `TWO`) `g + j + 1` of every weight row with the
    /// activation row `a` into `acc`, each block scaled by its product in `sc`; for the
    /// kinds with a minimum, also those blocks' steps of the `Σ m·s` chains in `mins`
    /// (lane w for weight row w: `fma(m_w,i, s_i, e)`, the group's minimums transposed in
    /// `ms`). Interleaved with the products, the chain's latency hides behind them.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn pair<const K: u8, const TWO: bool, const RW: usize>(
        rows: [&[u8]; RW],
        a: &QuantizedActs,
        sc: &[[f32; 16]; RW],
        ms: &[f32; 64],
        g: usize,
        j: usize,
        acc: &mut [__m256; RW],
        mins: &mut __m128,
    ) {
        let (bb, _, _, o, has_min) = layout(dtype(K));
        if has_min {
            for jj in j..j + 1 + TWO as usize {
                let mv = _mm_loadu_ps(ms.as_ptr().add(16 * (jj % 4) + 4 * (jj / 4)));
                *mins = _mm_fmadd_ps(mv, _mm_set1_ps(a.sum[g + jj]), *mins);
            }
        }
        let i = g + j;
        let mut q = [_mm512_setzero_si512(); RW];
        // The rows of a tile lie back to back, and the next tiles follow them: fetch the
        // same place in the row PREFETCH_TILES tiles on while this one computes (a hint;
        // past the matrix's end it reads nothing, and the address is never dereferenced).
        let ahead = PREFETCH_TILES * RW * rows[0].len();
        for w in 0..RW {
            let p = rows[w].as_ptr().wrapping_add(bb * i + ahead);
            _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
            q[w] = weights::<K, TWO>(rows[w].as_ptr().add(bb * i));
        }
        let p = a.qs.as_ptr().add(32 * i);
        let x = if TWO {
            _mm512_loadu_si512(p as *const __m512i)
        } else {
            _mm512_maskz_loadu_epi8(0xFFFF_FFFF, p)
        };
        // −o · Σ qx per lane, so that Σ u·qx starts from it.
        let start = if o != 0 {
            _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(o), x),
            )
        } else {
            _mm512_setzero_si512()
        };
        for w in 0..RW {
            let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[w], x));
            // One chain: block j, then block j + 1 (llama.cpp's).
            let mut c = _mm256_fmadd_ps(_mm256_set1_ps(sc[w][j]), lo(s), acc[w]);
            if TWO {
                c = _mm256_fmadd_ps(_mm256_set1_ps(sc[w][j + 1]), hi(s), c);
            }
            acc[w] = c;
        }
    }
}

// ------------------------------------------------------------------ QMatrix

/// How many tasks per thread a product's weight rows are cut into, for `per_row`
/// activation rows: a decoded token's product (1) in few long runs, each read as two
/// streams from memory (SmolLM2's 2-thread decode on its team: ×1.13 with 2 instead of
/// 4, ×1.25 beside a process that keeps a CPU busy; 1 was as fast on a quiet machine but
/// gained only ×1.13 beside the busy one); a prompt's in many, so that the last task to
/// finish leaves the other threads idle only briefly (SmolLM2's 2-thread prefill: ~400 →
/// ~470 tok/s with 16 instead of 4, alternating runs).
fn tasks_per_thread(per_row: usize) -> usize {
    if per_row > 1 {
        16
    } else {
        2
    }
}

/// Whether a prompt's per-row preparation (quantisation, pairing, the transpose) of `n`
/// numbers is worth splitting over the threads.
fn split_prep(n: usize) -> bool {
    crate::threads::threads() > 1 && n >= PAR_PREP_NUMBERS
}

/// Numbers of a prompt's activations from which their preparation runs on the threads.
const PAR_PREP_NUMBERS: usize = 1 << 14;

/// The `cols`-long rows of `x` quantised for `dtype`, in order, over the threads when
/// there are many.
fn quantize_prompt(dtype: GgmlType, x: &[f32], cols: usize) -> Result<Vec<QuantizedActs>> {
    if split_prep(x.len()) {
        crate::threads::map_collect(x.len() / cols, |i| {
            quantize_activations(dtype, &x[i * cols..(i + 1) * cols])
        })
        .into_iter()
        .collect()
    } else {
        x.chunks_exact(cols)
            .map(|r| quantize_activations(dtype, r))
            .collect()
    }
}

/// `y` (t, rows) = `yt` (rows, t) transposed, in tiles of 8 rows of `y` × 16 numbers:
/// each write fills a cache line, and the 8 lines written at a time stay within one L1
/// set's ways even when a row of `y` is a multiple of 4 KiB (a power-of-two `rows`).
fn transpose(yt: &[f32], rows: usize, t: usize, y: &mut [f32]) {
    // Eight rows of y (from row r0) at a time.
    let block = |r0: usize, yb: &mut [f32]| {
        for i0 in (0..rows).step_by(16) {
            let i1 = (i0 + 16).min(rows);
            for (dr, yr) in yb.chunks_exact_mut(rows).enumerate() {
                for (k, v) in yr[i0..i1].iter_mut().enumerate() {
                    *v = yt[(i0 + k) * t + r0 + dr];
                }
            }
        }
    };
    if rows == 0 {
        return;
    }
    if split_prep(y.len()) {
        crate::threads::for_each_chunk_mut(y, 8 * rows, |c, yb| block(8 * c, yb));
    } else {
        for (c, yb) in y.chunks_mut(8 * rows).enumerate() {
            block(8 * c, yb);
        }
    }
}

/// Bytes a [`QMatrix`] reads: a window of a memory-mapped file, or owned.
#[derive(Clone)]
pub enum QBytes {
    /// `len` bytes from `start` of a mapped file.
    Mapped {
        /// The mapped file.
        map: Arc<memmap2::Mmap>,
        /// First byte.
        start: usize,
        /// Byte count.
        len: usize,
    },
    /// Bytes in memory.
    Owned(Arc<Vec<u8>>),
}

impl QBytes {
    /// The bytes (empty if a mapped window lies outside its map).
    pub fn as_slice(&self) -> &[u8] {
        match self {
            // An out-of-range window reads as empty, which QMatrix::new then rejects.
            QBytes::Mapped { map, start, len } => start
                .checked_add(*len)
                .and_then(|end| map.get(*start..end))
                .unwrap_or(&[]),
            QBytes::Owned(v) => v,
        }
    }
}

/// Y (t, rows) of a prompt's product, written by several threads at once, each to its
/// own weight rows, i.e. its own columns of Y; a column range is not a contiguous slice,
/// so the threads share a pointer, each writing only its columns.
struct Columns<'a> {
    ptr: *mut f32,
    rows: usize,
    t: usize,
    _y: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: `Columns` only writes through `put`, whose callers each own distinct columns
// (QMatrix::run_row_ranges hands every weight row to one task).
unsafe impl Sync for Columns<'_> {}

impl<'a> Columns<'a> {
    /// Y (t, rows) over `y`, borrowed for as long as the writers run.
    fn new(y: &'a mut [f32], rows: usize, t: usize) -> Columns<'a> {
        debug_assert_eq!(y.len(), rows * t);
        Columns {
            ptr: y.as_mut_ptr(),
            rows,
            t,
            _y: std::marker::PhantomData,
        }
    }

    /// `Y[a][i..i + v.len()] = v`.
    ///
    /// # Safety
    /// `a < t`, `i + v.len() ≤ rows`, and no other thread writes these columns.
    unsafe fn put(&self, a: usize, i: usize, v: &[f32]) {
        debug_assert!(a < self.t && i + v.len() <= self.rows);
        // SAFETY: in bounds (the caller's contract), and these numbers are this
        // caller's alone.
        unsafe {
            std::ptr::copy_nonoverlapping(v.as_ptr(), self.ptr.add(a * self.rows + i), v.len())
        };
    }
}

/// Bytes of weight rows a prompt's product keeps in L1 at a time (the paired tiles and
/// the K-quant rows).
const PAIRED_WEIGHT_BYTES: usize = 16 << 10;

/// Rows of work below which [`QMatrix::matvec`] stays on the calling thread: waking the
/// pool costs a few microseconds, more than a small product takes.
const PAR_MIN_BYTES: usize = 1 << 17;

/// A weight matrix of `rows × cols` numbers stored row by row in a [`GgmlType`]
/// (each row is `cols / block_len` whole blocks), as a GGUF weight `(out, in)` is.
/// Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct QMatrix {
    dtype: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    bytes: QBytes,
    /// Per row, the blocks' scales (and Q4_1's minimums) widened to f32, built on first
    /// use by the AVX2 tile kernel ([`QMatrix::scale_table`]); shared between clones.
    scales: Arc<std::sync::OnceLock<Vec<f32>>>,
}

impl fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QMatrix({} × {} {})", self.rows, self.cols, self.dtype)
    }
}

impl QMatrix {
    /// A matrix over `bytes`; errors if the byte count is not `rows` rows of `cols` numbers.
    pub fn new(dtype: GgmlType, rows: usize, cols: usize, bytes: QBytes) -> Result<QMatrix> {
        let row_bytes = dtype.row_bytes(cols)?;
        let need = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| Error::Shape(format!("QMatrix {rows} × {cols} {dtype} is too large")))?;
        let have = bytes.as_slice().len();
        if have != need {
            return Err(Error::Shape(format!(
                "QMatrix {rows} × {cols} {dtype} needs {need} bytes, got {have}"
            )));
        }
        Ok(QMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            bytes,
            scales: Arc::default(),
        })
    }

    /// A matrix over owned bytes.
    pub fn from_vec(dtype: GgmlType, rows: usize, cols: usize, bytes: Vec<u8>) -> Result<QMatrix> {
        QMatrix::new(dtype, rows, cols, QBytes::Owned(Arc::new(bytes)))
    }

    /// Storage type.
    pub fn dtype(&self) -> GgmlType {
        self.dtype
    }

    /// Rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The raw bytes of row `i` (panics if `i >= rows`, like slice indexing).
    pub fn row_bytes_of(&self, i: usize) -> &[u8] {
        &self.bytes.as_slice()[i * self.row_bytes..(i + 1) * self.row_bytes]
    }

    /// All the bytes, row after row.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    fn check_x(&self, what: &str, x: &[f32], t: usize) -> Result<()> {
        if x.len() != t * self.cols {
            return Err(Error::mismatch(
                format!(
                    "QMatrix::{what} ({} {} × {})",
                    self.dtype, self.rows, self.cols
                ),
                &[t, self.cols],
                &[x.len()],
            ));
        }
        Ok(())
    }

    /// Prepare `x` (length `cols`) for [`QMatrix::matvec_prepared`]; one preparation
    /// serves every matrix of the same dtype and width (e.g. Q, K and V projections).
    pub fn prepare(&self, x: &[f32]) -> Result<QuantizedActs> {
        self.check_x("prepare", x, 1)?;
        quantize_activations(self.dtype, x)
    }

    /// y = W · x (decode): `x` has `cols` numbers, the result `rows`. Streams the
    /// quantised rows once; threads over rows when the matrix is large.
    ///
    /// # Shapes
    /// W (rows, cols) · x (cols) → y (rows)
    pub fn matvec(&self, x: &[f32]) -> Result<Vec<f32>> {
        let mut y = vec![0.0; self.rows];
        let a = self.prepare(x)?;
        self.matvec_prepared(&a, &mut y)?;
        Ok(y)
    }

    /// `y_m = W_m · x` for several matrices that read the same `x` (a layer's Q, K and V
    /// projections; a gated FFN's gate and up): `x` is prepared once, and all their rows
    /// share one pass over the thread pool instead of one each. Each result is what
    /// [`QMatrix::matvec`] gives, bit for bit. Matrices of different types or widths
    /// are run one by one.
    ///
    /// # Shapes
    /// W_m (rows_m, cols) · x (cols) → y_m (rows_m)
    pub fn matvec_group(mats: &[&QMatrix], x: &[f32]) -> Result<Vec<Vec<f32>>> {
        let Some(first) = mats.first() else {
            return Ok(Vec::new());
        };
        if mats
            .iter()
            .any(|m| m.dtype != first.dtype || m.cols != first.cols)
        {
            return mats.iter().map(|m| m.matvec(x)).collect();
        }
        let a = first.prepare(x)?;
        let mut ys: Vec<Vec<f32>> = mats.iter().map(|m| vec![0.0f32; m.rows]).collect();
        let threads = crate::threads::threads();
        let bytes: usize = mats.iter().map(|m| m.rows * m.row_bytes).sum();
        let parallel = threads > 1 && bytes >= PAR_MIN_BYTES;
        // (matrix, first row, its outputs): whole tiles of rows, tasks_per_thread(1) per
        // thread of each matrix.
        let mut jobs: Vec<(&QMatrix, usize, &mut [f32])> = Vec::new();
        for (m, y) in mats.iter().zip(ys.iter_mut()) {
            let chunk = if parallel {
                m.rows
                    .div_ceil(threads * tasks_per_thread(1))
                    .max(8)
                    .div_ceil(4)
                    * 4
            } else {
                m.rows.max(1)
            };
            for (c, out) in y.chunks_mut(chunk).enumerate() {
                jobs.push((*m, c * chunk, out));
            }
        }
        let run = |_, job: &mut (&QMatrix, usize, &mut [f32])| job.0.rows_into(job.1, job.2, &a);
        if parallel {
            crate::threads::for_each_mut(&mut jobs, run);
        } else {
            jobs.iter_mut().enumerate().for_each(|(i, j)| run(i, j));
        }
        Ok(ys)
    }

    /// Rows `i0 .. i0 + out.len()` of `W · x` into `out`, on the calling thread (`a`
    /// prepared for this matrix).
    fn rows_into(&self, i0: usize, out: &mut [f32], a: &QuantizedActs) {
        if self.tiled() {
            self.tile_rows(i0, out, std::slice::from_ref(a));
            return;
        }
        let k = self.row_kernel();
        for (j, y) in out.iter_mut().enumerate() {
            *y = k(self.row_bytes_of(i0 + j), a);
        }
    }

    /// y = W · x with `x` already prepared ([`QMatrix::prepare`]), written into `y` (length `rows`).
    pub fn matvec_prepared(&self, a: &QuantizedActs, y: &mut [f32]) -> Result<()> {
        self.check_prepared(a, y)?;
        if self.tiled() {
            self.run_row_groups(y, 1, |i0, out| {
                self.tile_rows(i0, out, std::slice::from_ref(a))
            });
            return Ok(());
        }
        let k = self.row_kernel();
        self.run_rows(y, |i| k(self.row_bytes_of(i), a));
        Ok(())
    }

    /// The scalar twin of [`QMatrix::matvec`] (reference dots, one thread).
    pub fn matvec_reference(&self, x: &[f32]) -> Result<Vec<f32>> {
        let a = self.prepare(x)?;
        let k: DotFn = if self.repacked() {
            |r, a| reference::dot_q4_k_repacked(r, a, false)
        } else {
            reference::kernel(self.dtype)
        };
        Ok((0..self.rows)
            .map(|i| k(self.row_bytes_of(i), &a))
            .collect())
    }

    fn check_prepared(&self, a: &QuantizedActs, y: &[f32]) -> Result<()> {
        if a.len != self.cols || a.kind != self.dtype.activation_kind() || y.len() != self.rows {
            return Err(Error::Argument(format!(
                "QMatrix::matvec_prepared ({} {} × {}): activations of {} numbers as {:?} and an output of {} \
                 do not fit; prepare x with this matrix's `prepare`",
                self.dtype, self.rows, self.cols, a.len, a.kind,
                y.len()
            )));
        }
        Ok(())
    }

    /// The per-row f32 table of block scales (Q4_1: nb scales then nb minimums; Q8_0: nb
    /// scales), widened from the blocks' f16 once and kept (4 or 8 bytes per 32 weights).
    fn scale_table(&self) -> &[f32] {
        self.scales.get_or_init(|| {
            let bb = self.dtype.block_bytes();
            let nb = self.cols / self.dtype.block_len().max(1);
            let two = self.dtype == GgmlType::Q4_1;
            let mut t = Vec::with_capacity(self.rows * nb * if two { 2 } else { 1 });
            for i in 0..self.rows {
                let row = self.row_bytes_of(i);
                let f = |b: usize, off: usize| {
                    f16::from_le_bytes([row[b * bb + off], row[b * bb + off + 1]]).to_f32()
                };
                t.extend((0..nb).map(|b| f(b, 0)));
                if two {
                    t.extend((0..nb).map(|b| f(b, 2)));
                }
            }
            t
        })
    }

    /// Whether this matrix has a tile kernel on this CPU: [`avx512::tile`] for the
    /// 32-block types with AVX-512 VNNI, else [`avx2::tile`] for Q4_1 and Q8_0.
    /// Whether llama.cpp keeps this matrix repacked: a Q4_K matrix with a multiple of 8
    /// rows, which it interleaves eight rows at a time on an AVX2 CPU and multiplies
    /// with its own kernels. lucent sums such a matrix's products in their order
    /// ([`KOrder::Gemv`], [`KOrder::Gemm`]).
    fn repacked(&self) -> bool {
        self.dtype == GgmlType::Q4_K && self.rows.is_multiple_of(8)
    }

    /// The dot kernel of one weight row with one activation row: a token's products,
    /// and a prompt's rows outside whole fours.
    fn row_kernel(&self) -> DotFn {
        if self.repacked() {
            repacked_kernels().0
        } else {
            dot_kernel(self.dtype)
        }
    }

    /// The kernel of one weight row with four activation rows, where one reads each
    /// weight block once for four rows (the K-quants on AVX-512) or where llama.cpp sums
    /// four rows in its own order (repacked Q4_K, unless [`row_invariant`]).
    fn row_kernel4(&self) -> Option<Dot4Fn> {
        if self.repacked() {
            return (!ROW_INVARIANT.with(std::cell::Cell::get)).then(|| repacked_kernels().1);
        }
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            return avx512::kernel4(self.dtype);
        }
        None
    }

    /// The kernels of a prompt product of `t` activation rows: one row and four. Like
    /// llama.cpp, a K-quant matrix it has not repacked takes its tiled order from
    /// [`TILED_MIN_ROWS`] rows on (unless [`row_invariant`]).
    fn prompt_kernels(&self, t: usize) -> (DotFn, Option<Dot4Fn>) {
        if t >= TILED_MIN_ROWS && !self.repacked() && !ROW_INVARIANT.with(std::cell::Cell::get) {
            if let Some((k, k4)) = tiled_kernels(self.dtype) {
                return (k, Some(k4));
            }
        }
        (self.row_kernel(), self.row_kernel4())
    }

    fn tiled(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self.dtype {
                GgmlType::Q4_1 | GgmlType::Q8_0 => simd_available(),
                GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q5_1 => avx512::available(),
                _ => false,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Dots of weight rows `i0..i0 + out.len() / acts.len()` with every row of `acts`,
    /// into `out` (weight-row major: `out[w * acts.len() + a]`), through the tile kernel
    /// (4 weight rows × 1 — as interleaved pairs where the CPU runs
    /// [`avx512::pair_tile`] —, or 1 × 4 activation rows, and 1 × 1 for what is left).
    /// Only when [`QMatrix::tiled`].
    #[allow(unused_variables)]
    fn tile_rows(&self, i0: usize, out: &mut [f32], acts: &[QuantizedActs]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: tiled() checked the CPU features for the kernel chosen here (AVX-512
        // VNNI only after avx512::available(), the AVX2 kernel only for Q4_1/Q8_0); rows
        // and acts were checked to be `cols` numbers (check_prepared / check_x) and
        // prepared for this type.
        unsafe {
            let vnni = avx512::available();
            if acts.len() == 1 && avx512::pairs_available() {
                match self.dtype {
                    GgmlType::Q4_0 => self.decode_pairs::<{ avx512::Q4_0 }>(i0, out, &acts[0]),
                    GgmlType::Q4_1 => self.decode_pairs::<{ avx512::Q4_1 }>(i0, out, &acts[0]),
                    GgmlType::Q5_0 => self.decode_pairs::<{ avx512::Q5_0 }>(i0, out, &acts[0]),
                    GgmlType::Q5_1 => self.decode_pairs::<{ avx512::Q5_1 }>(i0, out, &acts[0]),
                    _ => self.decode_pairs::<{ avx512::Q8_0 }>(i0, out, &acts[0]),
                }
                return;
            }
            let kernels: (Tile<4, 1>, Option<Tile<1, 4>>, Tile<1, 1>) = match (vnni, self.dtype) {
                (true, GgmlType::Q4_0) => avx512::tiles::<{ avx512::Q4_0 }>(),
                (true, GgmlType::Q4_1) => avx512::tiles::<{ avx512::Q4_1 }>(),
                (true, GgmlType::Q5_0) => avx512::tiles::<{ avx512::Q5_0 }>(),
                (true, GgmlType::Q5_1) => avx512::tiles::<{ avx512::Q5_1 }>(),
                (true, _) => avx512::tiles::<{ avx512::Q8_0 }>(),
                (false, GgmlType::Q8_0) => (
                    avx2::tile::<true, 4, 1>,
                    Some(avx2::tile::<true, 1, 4>),
                    avx2::tile::<true, 1, 1>,
                ),
                (false, _) => (
                    avx2::tile::<false, 4, 1>,
                    Some(avx2::tile::<false, 1, 4>),
                    avx2::tile::<false, 1, 1>,
                ),
            };
            // The AVX-512 kernels read the scales from the blocks: no table to build.
            let table: &[f32] = if vnni { &[] } else { self.scale_table() };
            self.tile_rows_with(i0, out, acts, table, kernels);
        }
    }

    /// Rows `i0 .. i0 + out.len()` of a decoded token's product (one activation row,
    /// type `K`, this matrix's) through [`avx512::pair_tile`], four weight rows at a
    /// time (the activations spread once), and [`avx512::tile`] for the last rows.
    ///
    /// # Safety
    /// [`avx512::pairs_available`]; `a` prepared for this matrix (check_prepared /
    /// check_x).
    #[cfg(target_arch = "x86_64")]
    unsafe fn decode_pairs<const K: u8>(&self, i0: usize, out: &mut [f32], a: &QuantizedActs) {
        thread_local! {
            /// This thread's spread activations, reused from product to product.
            static SPREAD: std::cell::RefCell<avx512::Spread> = Default::default();
        }
        // SAFETY: this function's contract (pairs_available, `a` prepared for this
        // matrix), and `sp` spread from `a` for K just here.
        SPREAD.with_borrow_mut(|sp| unsafe {
            sp.fill::<K>(a);
            let r = |w: usize| self.row_bytes_of(i0 + w);
            // Two streams of tiles, from the first half of the rows and from the
            // second, taken in turn: memory then reads ahead at two places. One core
            // streams Q4_1 from DRAM at 14 GB/s so, against 11 in one stream
            // (matvec_bench, 600 MB).
            let tiles = out.len() / 4;
            let half = tiles.div_ceil(2);
            for k in 0..half {
                for t in [k, half + k] {
                    if t < tiles {
                        let w = 4 * t;
                        let o: &mut [f32; 4] = (&mut out[w..w + 4]).try_into().expect("four rows");
                        avx512::pair_tile::<K>([r(w), r(w + 1), r(w + 2), r(w + 3)], a, sp, o);
                    }
                }
            }
            let mut w = 4 * tiles;
            while w < out.len() {
                let mut o = [[0.0f32; 1]; 1];
                avx512::tile::<K, 1>([r(w)], [&[]], [a], &mut o);
                out[w] = o[0][0];
                w += 1;
            }
        })
    }

    /// [`QMatrix::tile_rows`] with one type's kernels: 4 weight rows × 1, 1 × 4
    /// activation rows (where there is one), 1 × 1; each given its rows' part of `table`
    /// (the scale table, or empty for kernels that do not read it).
    ///
    /// # Safety
    /// As the kernels'.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_rows_with(
        &self,
        i0: usize,
        out: &mut [f32],
        acts: &[QuantizedActs],
        table: &[f32],
        (k41, k14, k11): (Tile<4, 1>, Option<Tile<1, 4>>, Tile<1, 1>),
    ) {
        unsafe {
            let t = acts.len();
            let n = out.len() / t;
            let r = |w: usize| self.row_bytes_of(i0 + w);
            let per = table.len() / self.rows.max(1);
            let sc = |w: usize| &table[(i0 + w) * per..(i0 + w + 1) * per];
            let mut w = 0;
            if t == 1 {
                while w + 4 <= n {
                    let mut o = [[0.0f32; 1]; 4];
                    k41(
                        [r(w), r(w + 1), r(w + 2), r(w + 3)],
                        [sc(w), sc(w + 1), sc(w + 2), sc(w + 3)],
                        [&acts[0]],
                        &mut o,
                    );
                    for (k, v) in o.iter().enumerate() {
                        out[w + k] = v[0];
                    }
                    w += 4;
                }
            }
            while w < n {
                let mut a = 0;
                while let (Some(k14), true) = (k14, a + 4 <= t) {
                    let mut o = [[0.0f32; 4]; 1];
                    k14(
                        [r(w)],
                        [sc(w)],
                        [&acts[a], &acts[a + 1], &acts[a + 2], &acts[a + 3]],
                        &mut o,
                    );
                    out[w * t + a..w * t + a + 4].copy_from_slice(&o[0]);
                    a += 4;
                }
                while a < t {
                    let mut o = [[0.0f32; 1]; 1];
                    k11([r(w)], [sc(w)], [&acts[a]], &mut o);
                    out[w * t + a] = o[0][0];
                    a += 1;
                }
                w += 1;
            }
        }
    }

    /// A prompt's product through [`avx512::paired_tile`] (type `K`, this matrix's):
    /// `y` (t, rows) from the `t` activation rows `acts` (t ≥ 2). The activation rows
    /// are paired once; the weight rows go in L1-sized blocks, each decoded once
    /// ([`avx512::Decoded`]) and then met by every four (or two) activation rows, four
    /// weight rows at a time. A last odd activation row takes the 1 × 1 tile.
    #[cfg(target_arch = "x86_64")]
    fn prefill_paired<const K: u8>(&self, y: &mut [f32], acts: &[QuantizedActs]) {
        let t = acts.len();
        let pair = |c: &[QuantizedActs]| avx512::Paired::new::<K>(&c[0], &c[1]);
        let pairs: Vec<avx512::Paired> = if split_prep(t * self.cols) {
            crate::threads::map_collect(t / 2, |i| pair(&acts[2 * i..2 * i + 2]))
        } else {
            acts.chunks_exact(2).map(pair).collect()
        };
        // Blocks of weight rows whose decoded form stays in L1 while every activation pair
        // passes it (the pairs then come from L2 once per block).
        let nb = self.cols / QK;
        let wb = (PAIRED_WEIGHT_BYTES / avx512::Decoded::row_bytes(nb).max(1)).max(4) / 4 * 4;
        let out = Columns::new(y, self.rows, t);
        self.run_row_ranges(t, |i0, n| {
            let mut dec = avx512::Decoded::default();
            for b0 in (i0..i0 + n).step_by(wb) {
                let rows = b0..b0 + wb.min(i0 + n - b0);
                // SAFETY: prefill_paired's caller checked avx512::available(); the rows
                // are this matrix's, nb blocks of type K.
                unsafe { dec.fill::<K>(rows.clone().map(|i| self.row_bytes_of(i)), nb) };
                self.paired_rows::<K>(&dec, rows, acts, &pairs, &out);
            }
        });
    }

    /// Weight rows `rows` of [`QMatrix::prefill_paired`], decoded in `dec`, against every
    /// activation row, into those columns of `out`.
    #[cfg(target_arch = "x86_64")]
    fn paired_rows<const K: u8>(
        &self,
        dec: &avx512::Decoded,
        rows: Range<usize>,
        acts: &[QuantizedActs],
        pairs: &[avx512::Paired],
        out: &Columns,
    ) {
        let t = acts.len();
        // SAFETY: prefill_paired's caller checked avx512::available(); dec holds rows of
        // this matrix (K is its type), the activations were prepared for it (check_x),
        // and pairs[p] pairs acts[2p] and acts[2p + 1].
        unsafe {
            let mut a = 0;
            while a + 4 <= t {
                let p = [&pairs[a / 2], &pairs[a / 2 + 1]];
                let x = [&acts[a], &acts[a + 1], &acts[a + 2], &acts[a + 3]];
                Self::paired_column::<K, 2, 4>(dec, rows.clone(), a, p, x, out);
                a += 4;
            }
            if a + 2 <= t {
                let (p, x) = ([&pairs[a / 2]], [&acts[a], &acts[a + 1]]);
                Self::paired_column::<K, 1, 2>(dec, rows.clone(), a, p, x, out);
                a += 2;
            }
            if a < t {
                for i in rows {
                    let mut o = [[0.0f32; 1]; 1];
                    avx512::tile::<K, 1>([self.row_bytes_of(i)], [&[]], [&acts[a]], &mut o);
                    out.put(a, i, &o[0]);
                }
            }
        }
    }

    /// The weight rows `rows` (decoded in `dec`, from its row 0) against the `RA`
    /// activation rows from `a` (in `PA` pairs): four weight rows a tile, then one at a
    /// time; results into `out`'s rows `a..a + RA`, columns `rows`.
    ///
    /// # Safety
    /// As [`avx512::paired_tile`]'s, and as [`Columns::put`]'s for those columns.
    #[cfg(target_arch = "x86_64")]
    unsafe fn paired_column<const K: u8, const PA: usize, const RA: usize>(
        dec: &avx512::Decoded,
        rows: Range<usize>,
        a: usize,
        p: [&avx512::Paired; PA],
        x: [&QuantizedActs; RA],
        out: &Columns,
    ) {
        unsafe {
            let n = rows.len();
            let mut w = 0;
            while w + 4 <= n {
                let mut o = [[0.0f32; RA]; 4];
                avx512::paired_tile::<K, 4, PA, RA>(dec, [w, w + 1, w + 2, w + 3], p, x, &mut o);
                // Activation row a + k's four results, one for each weight row.
                let by_row: [[f32; 4]; RA] =
                    std::array::from_fn(|k| [o[0][k], o[1][k], o[2][k], o[3][k]]);
                for (k, v) in by_row.iter().enumerate() {
                    out.put(a + k, rows.start + w, v);
                }
                w += 4;
            }
            while w < n {
                let mut o = [[0.0f32; RA]; 1];
                avx512::paired_tile::<K, 1, PA, RA>(dec, [w], p, x, &mut o);
                for (k, &v) in o[0].iter().enumerate() {
                    out.put(a + k, rows.start + w, &[v]);
                }
                w += 1;
            }
        }
    }

    /// Split the rows into groups of whole tiles and run `f(first_row, out)` on each,
    /// over the thread pool when the work is large; `out` holds `per_row` numbers a row.
    fn run_row_groups(&self, y: &mut [f32], per_row: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
        let threads = crate::threads::threads();
        if threads <= 1 || self.rows * self.row_bytes * per_row < PAR_MIN_BYTES || self.rows < 8 {
            f(0, y);
            return;
        }
        let chunk = (self
            .rows
            .div_ceil(threads * tasks_per_thread(per_row))
            .max(8))
        .div_ceil(4)
            * 4;
        crate::threads::for_each_chunk_mut(y, chunk * per_row, |c, ys| f(c * chunk, ys));
    }

    /// [`QMatrix::run_row_groups`]'s split of the rows, as ranges: `f(first_row, count)`
    /// on each, for work that writes its results itself (a prompt's [`Columns`]).
    fn run_row_ranges(&self, per_row: usize, f: impl Fn(usize, usize) + Sync) {
        let threads = crate::threads::threads();
        if threads <= 1 || self.rows * self.row_bytes * per_row < PAR_MIN_BYTES || self.rows < 8 {
            f(0, self.rows);
            return;
        }
        let chunk = (self
            .rows
            .div_ceil(threads * tasks_per_thread(per_row))
            .max(8))
        .div_ceil(4)
            * 4;
        crate::threads::for_each_index(self.rows.div_ceil(chunk), |c| {
            f(c * chunk, chunk.min(self.rows - c * chunk))
        });
    }

    /// Fill `y[i] = f(i)` for every row, over the thread pool when the matrix is large.
    fn run_rows(&self, y: &mut [f32], f: impl Fn(usize) -> f32 + Sync) {
        let threads = crate::threads::threads();
        if threads <= 1 || self.rows * self.row_bytes < PAR_MIN_BYTES || self.rows < 2 {
            for (i, v) in y.iter_mut().enumerate() {
                *v = f(i);
            }
            return;
        }
        let chunk = self.rows.div_ceil(threads * 4).max(8);
        crate::threads::for_each_chunk_mut(y, chunk, |c, ys| {
            for (j, v) in ys.iter_mut().enumerate() {
                *v = f(c * chunk + j);
            }
        });
    }

    /// Rows `range` widened to f32, row-major ((range.len(), cols)).
    pub fn dequantize_rows(&self, range: Range<usize>) -> Result<Vec<f32>> {
        if range.start > range.end || range.end > self.rows {
            return Err(Error::Argument(format!(
                "QMatrix::dequantize_rows: rows {range:?} outside 0..{}",
                self.rows
            )));
        }
        let mut out = vec![0.0f32; range.len() * self.cols];
        let bytes =
            &self.bytes.as_slice()[range.start * self.row_bytes..range.end * self.row_bytes];
        dequantize(self.dtype, bytes, &mut out)?;
        Ok(out)
    }

    /// The whole matrix widened to f32 (rows, cols).
    pub fn dequantize_all(&self) -> Result<Vec<f32>> {
        self.dequantize_rows(0..self.rows)
    }

    /// Y = X · Wᵀ for `t` rows of `x`, each output number computed exactly as
    /// [`QMatrix::matvec`] computes it (the row of x quantised on its own, the same dot
    /// kernel): so a row's result never depends on which other rows came with it (batch
    /// invariance — cached decoding then equals the full forward bit for bit). The
    /// weight rows go in L1-sized blocks that every activation row meets while they are
    /// in cache (on AVX-512, two activation rows per register: `avx512::paired_tile`);
    /// threads split the weight rows.
    ///
    /// # Shapes
    /// X (t, cols) · Wᵀ (cols, rows) → Y (t, rows)
    pub fn matmul_t_quantized(&self, x: &[f32], t: usize) -> Result<Vec<f32>> {
        self.check_x("matmul_t_quantized", x, t)?;
        if t == 0 || self.rows == 0 {
            return Ok(vec![0.0f32; t * self.rows]);
        }
        let acts = quantize_prompt(self.dtype, x, self.cols)?;
        Ok(self.matmul_t_prepared(&acts))
    }

    /// [`QMatrix::matmul_t_quantized`] for several matrices over the same `x` (a
    /// prompt's Q, K, V, or gate and up): the rows of `x` are quantised once for every
    /// matrix that wants the same activation kind. Each result equals its matrix's own
    /// `matmul_t_quantized` bit for bit.
    ///
    /// # Shapes
    /// X (t, cols) · W_mᵀ (cols, rows_m) → Y_m (t, rows_m)
    pub fn matmul_t_quantized_group(
        mats: &[&QMatrix],
        x: &[f32],
        t: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let mut prepared: Vec<(ActKind, Vec<QuantizedActs>)> = Vec::new();
        let mut ys = Vec::with_capacity(mats.len());
        for m in mats {
            m.check_x("matmul_t_quantized_group", x, t)?;
            if t == 0 || m.rows == 0 {
                ys.push(vec![0.0f32; t * m.rows]);
                continue;
            }
            let kind = m.dtype.activation_kind();
            let at = match prepared.iter().position(|(k, _)| *k == kind) {
                Some(i) => i,
                None => {
                    prepared.push((kind, quantize_prompt(m.dtype, x, m.cols)?));
                    prepared.len() - 1
                }
            };
            ys.push(m.matmul_t_prepared(&prepared[at].1));
        }
        Ok(ys)
    }

    /// Y = X · Wᵀ from activation rows already quantised for this matrix's type
    /// (t = `acts.len()` ≥ 1, each `cols` long: the callers check).
    fn matmul_t_prepared(&self, acts: &[QuantizedActs]) -> Vec<f32> {
        let t = acts.len();
        let mut y = vec![0.0f32; t * self.rows];
        let (k, k4) = self.prompt_kernels(t);
        #[cfg(target_arch = "x86_64")]
        if self.tiled() && avx512::available() && t >= 2 {
            // The paired tiles write Y (t, rows) themselves.
            match self.dtype {
                GgmlType::Q4_0 => self.prefill_paired::<{ avx512::Q4_0 }>(&mut y, acts),
                GgmlType::Q4_1 => self.prefill_paired::<{ avx512::Q4_1 }>(&mut y, acts),
                GgmlType::Q5_0 => self.prefill_paired::<{ avx512::Q5_0 }>(&mut y, acts),
                GgmlType::Q5_1 => self.prefill_paired::<{ avx512::Q5_1 }>(&mut y, acts),
                _ => self.prefill_paired::<{ avx512::Q8_0 }>(&mut y, acts),
            }
            return y;
        }
        if self.tiled() {
            // yt: (rows, t), one contiguous run of t results per weight row.
            let mut yt = vec![0.0f32; t * self.rows];
            self.run_row_groups(&mut yt, t, |i0, out| self.tile_rows(i0, out, acts));
            transpose(&yt, self.rows, t, &mut y);
            return y;
        }
        // Four activation rows at a time where a kernel reads each weight block once for
        // all four (the K-quants on AVX-512; the same numbers as one row at a time) or
        // where llama.cpp sums rows in fours its own way (repacked Q4_K).
        #[cfg(target_arch = "x86_64")]
        if self.repacked() && k4.is_some() && avx512::available() {
            // Repacked Q4_K on AVX-512: each block of rows decoded once, then met by
            // every four activation rows.
            let nb = self.cols / QK_K;
            let wb = (PAIRED_WEIGHT_BYTES / avx512::DecodedQ4K::row_bytes(nb).max(1)).max(1);
            let fill = |dec: &mut avx512::DecodedQ4K, rows: Range<usize>| {
                // SAFETY: avx512::available(); the rows are this matrix's nb Q4_K blocks.
                unsafe { dec.fill(rows.map(|i| self.row_bytes_of(i)), nb) }
            };
            // SAFETY: as above; dec holds the block's rows (r < its length), and the
            // activations were prepared as Q8_K for this matrix (check_x).
            let k4 = |dec: &avx512::DecodedQ4K, r: usize, _: usize, x: [&QuantizedActs; 4]| unsafe {
                avx512::q4_k_gemm4(dec, r, x)
            };
            self.prompt_in_fours(&mut y, acts, wb, k, fill, Some(k4));
            return y;
        }
        let wb = (PAIRED_WEIGHT_BYTES / self.row_bytes.max(1)).max(1);
        let k4 = k4.map(|k4| {
            move |_: &(), _: usize, i: usize, x: [&QuantizedActs; 4]| k4(self.row_bytes_of(i), x)
        });
        self.prompt_in_fours(&mut y, acts, wb, k, |_: &mut (), _| {}, k4);
        y
    }

    /// The prompt product's loop for kernels of four activation rows: weight rows in
    /// blocks of `wb` (L1-sized), each block first prepared by `fill` into the task's
    /// scratch `S`; then every four activation rows meet the whole block (`k4(scratch,
    /// r, i, x)` for row `i`, the block's `r`-th) before the next four come; the rows
    /// outside whole fours (all of them without `k4`) through `k`, one at a time. Each
    /// task writes its rows' columns of `y` (t, rows).
    fn prompt_in_fours<S: Default, K4>(
        &self,
        y: &mut [f32],
        acts: &[QuantizedActs],
        wb: usize,
        k: DotFn,
        fill: impl Fn(&mut S, Range<usize>) + Sync,
        k4: Option<K4>,
    ) where
        K4: Fn(&S, usize, usize, [&QuantizedActs; 4]) -> [f32; 4] + Sync,
    {
        let t = acts.len();
        let out = Columns::new(y, self.rows, t);
        self.run_row_ranges(t, |i0, n| {
            let mut scratch = S::default();
            for first in (i0..i0 + n).step_by(wb) {
                let rows = first..first + wb.min(i0 + n - first);
                fill(&mut scratch, rows.clone());
                let mut a = 0;
                if let Some(k4) = &k4 {
                    while a + 4 <= t {
                        let x = [&acts[a], &acts[a + 1], &acts[a + 2], &acts[a + 3]];
                        for (r, i) in rows.clone().enumerate() {
                            let v = k4(&scratch, r, i, x);
                            for (j, vj) in v.iter().enumerate() {
                                // SAFETY: a + j < t, i < rows, and row i is this task's.
                                unsafe { out.put(a + j, i, std::slice::from_ref(vj)) };
                            }
                        }
                        a += 4;
                    }
                }
                for i in rows {
                    let w = self.row_bytes_of(i);
                    for (r, x) in acts.iter().enumerate().skip(a) {
                        // SAFETY: r < t, i < rows, and row i is this task's.
                        unsafe { out.put(r, i, &[k(w, x)]) };
                    }
                }
            }
        });
    }

    /// Y = X · Wᵀ (prefill): `x` is `t` rows of `cols`, the result `t` rows of `rows`.
    /// Dequantises tiles of W and multiplies them with the f32 GEMM.
    ///
    /// # Shapes
    /// X (t, cols) · Wᵀ (cols, rows) → Y (t, rows)
    pub fn matmul_t(&self, x: &[f32], t: usize) -> Result<Vec<f32>> {
        self.check_x("matmul_t", x, t)?;
        let mut y = vec![0.0f32; t * self.rows];
        if t == 0 || self.rows == 0 {
            return Ok(y);
        }
        // Tiles of about 1 MiB of f32 weights: fit in L2 while the GEMM reads them t times.
        let tile = ((1usize << 18) / self.cols.max(1)).clamp(16, self.rows.max(16));
        let mut c = Vec::new();
        let mut r0 = 0;
        while r0 < self.rows {
            let r1 = (r0 + tile).min(self.rows);
            let w = self.dequantize_rows(r0..r1)?; // (r1 - r0, cols)
            c.resize(t * (r1 - r0), 0.0);
            crate::ops::matmul::gemm_into(&mut c, x, &w, t, self.cols, r1 - r0, true); // (t, r1 - r0)
            for (yr, cr) in y.chunks_exact_mut(self.rows).zip(c.chunks_exact(r1 - r0)) {
                yr[r0..r1].copy_from_slice(cr);
            }
            r0 = r1;
        }
        Ok(y)
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    //! The AVX-512 kernels against the AVX2 ones they replace, bit for bit (both private,
    //! so tests/quant.rs, which holds each path to the scalar twin, cannot reach them).
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// `rows` random rows of `t` with finite f16 scales (and minimums) in every block.
    fn random_matrix(t: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> Result<QMatrix> {
        let mut b: Vec<u8> = (0..rows * t.row_bytes(cols)?)
            .map(|_| rng.random())
            .collect();
        for blk in b.chunks_exact_mut(t.block_bytes()) {
            let mut put = |at: usize, rng: &mut StdRng| {
                let v = f16::from_f32(rng.random_range(-0.1f32..0.1)).to_le_bytes();
                blk[at..at + 2].copy_from_slice(&v);
            };
            match t {
                GgmlType::Q6_K => put(208, rng),
                GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
                    put(0, rng);
                    put(2, rng);
                }
                _ => put(0, rng),
            }
        }
        QMatrix::from_vec(t, rows, cols, b)
    }

    #[test]
    fn avx512_kernels_equal_avx2_bit_for_bit() -> Result<()> {
        if !avx512::available() {
            eprintln!("notice: no AVX-512 VNNI on this CPU; nothing to compare");
            return Ok(());
        }
        crate::threads::set_threads(1);
        let mut rng = StdRng::seed_from_u64(5);
        let tiled = [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
        ];
        for t in tiled {
            for rows in [1usize, 3, 4, 5, 9] {
                for blocks in [1usize, 2, 3, 15, 16, 17, 18, 33] {
                    let cols = QK * blocks;
                    let m = random_matrix(t, rows, cols, &mut rng)?;
                    let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0..1.0)).collect();
                    let a = m.prepare(&x)?;
                    let mut y = vec![0.0; rows];
                    m.matvec_prepared(&a, &mut y)?; // the AVX-512 tiles
                    let table = m.scale_table();
                    let per = table.len() / rows;
                    for (i, &got) in y.iter().enumerate() {
                        let row = m.row_bytes_of(i);
                        let want = if matches!(t, GgmlType::Q4_1 | GgmlType::Q8_0) {
                            let mut o = [[0.0f32; 1]; 1];
                            let sc = &table[i * per..(i + 1) * per];
                            // SAFETY: avx512::available() implies AVX2+FMA+F16C; the row,
                            // its table and the activations are this matrix's.
                            unsafe {
                                if t == GgmlType::Q8_0 {
                                    avx2::tile::<true, 1, 1>([row], [sc], [&a], &mut o);
                                } else {
                                    avx2::tile::<false, 1, 1>([row], [sc], [&a], &mut o);
                                }
                            }
                            o[0][0]
                        } else {
                            avx2::kernel(t)(row, &a)
                        };
                        assert_eq!(got.to_bits(), want.to_bits(), "{t} {rows}×{cols} row {i}");
                    }
                    // matvec took the paired tiles where the CPU runs them; the four-row
                    // tile it takes elsewhere gives the same numbers.
                    if rows >= 4 {
                        let (k41, _, _) = match t {
                            GgmlType::Q4_0 => avx512::tiles::<{ avx512::Q4_0 }>(),
                            GgmlType::Q4_1 => avx512::tiles::<{ avx512::Q4_1 }>(),
                            GgmlType::Q5_0 => avx512::tiles::<{ avx512::Q5_0 }>(),
                            GgmlType::Q5_1 => avx512::tiles::<{ avx512::Q5_1 }>(),
                            _ => avx512::tiles::<{ avx512::Q8_0 }>(),
                        };
                        let rs: [&[u8]; 4] = std::array::from_fn(|w| m.row_bytes_of(w));
                        let mut o = [[0.0f32; 1]; 4];
                        // SAFETY: avx512::available(); the rows and activations are this
                        // matrix's.
                        unsafe { k41(rs, [&[]; 4], [&a], &mut o) };
                        for w in 0..4 {
                            assert_eq!(o[w][0].to_bits(), y[w].to_bits(), "{t} 4×{cols} row {w}");
                        }
                    }
                }
            }
        }
        for t in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
            for blocks in [1usize, 2, 3, 5] {
                let cols = QK_K * blocks;
                let m = random_matrix(t, 4, cols, &mut rng)?;
                let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-3.0..3.0)).collect();
                let a = m.prepare(&x)?;
                for i in 0..4 {
                    let row = m.row_bytes_of(i);
                    let (got, want) = (avx512::kernel(t)(row, &a), avx2::kernel(t)(row, &a));
                    assert_eq!(got.to_bits(), want.to_bits(), "{t} {cols} row {i}");
                    // Both in llama.cpp's order, as the twin.
                    let twin = reference::kernel(t)(row, &a);
                    assert_eq!(want.to_bits(), twin.to_bits(), "{t} {cols} row {i}: twin");
                    // The tiled order (prompts of 8 rows or more).
                    let tw = reference::tiled_kernels(t).map(|k| k.0(row, &a));
                    let t512 = avx512::tiled_kernels(t).map(|k| (k.0(row, &a), k.1(row, [&a; 4])));
                    let t2 = avx2::tiled_kernels(t).map(|k| (k.0(row, &a), k.1(row, [&a; 4])));
                    if let (Some(tw), Some((x1, x4)), Some((y1, y4))) = (tw, t512, t2) {
                        for v in [x1, y1].into_iter().chain(x4).chain(y4) {
                            assert_eq!(v.to_bits(), tw.to_bits(), "{t} {cols} row {i}: tiled");
                        }
                    } else {
                        panic!("{t}: no tiled kernels");
                    }
                    if t == GgmlType::Q4_K {
                        // The repacked orders, token and grouped prompt rows.
                        let (v512, g512) = avx512::repacked_kernels();
                        let (v2, g2) = avx2::repacked_kernels();
                        let v = reference::dot_q4_k_repacked(row, &a, false);
                        let g = reference::dot_q4_k_repacked(row, &a, true);
                        assert_eq!(v512(row, &a).to_bits(), v.to_bits(), "{cols} row {i}");
                        assert_eq!(v2(row, &a).to_bits(), v.to_bits(), "{cols} row {i}");
                        for (x, y) in g512(row, [&a; 4]).iter().zip(g2(row, [&a; 4])) {
                            assert_eq!(x.to_bits(), g.to_bits(), "{cols} row {i}: grouped");
                            assert_eq!(y.to_bits(), g.to_bits(), "{cols} row {i}: grouped");
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
