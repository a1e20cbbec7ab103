//! Block-integer int8 products for a decoder's GGUF weights (`Linear::keep_int8_blocks`;
//! `Precision::Int8` takes the per-row `Int8Matrix` for now, docs/precision.md says why):
//! a GGUF matrix's own block integers, widened once at load to one `i8` per weight
//! (nothing re-rounded), against activation rows quantised with llama.cpp's own rule
//! for that block type
//! (`quantize_activations`), so both sides' integers are llama.cpp's.
//!
//! # The arithmetic
//!
//! Weight row j, block b (32 or 256 numbers), activation row r with scale `dx` per block:
//!
//! - `S = Σ_g sc_g · Σ_{e ∈ g} w_e · qx_e` over the block's groups g of 16 (exact, in
//!   i32): `w` the block's integers (Q4_0 `q − 8`, Q5_0 `q − 16`, Q4_1 / Q5_1 / Q8_0
//!   `q`, IQ4_NL / IQ4_XS the grid values, Q4_K / Q5_K / Q2_K `q`, Q3_K `q − 4`, Q6_K
//!   `q − 32`) and `sc_g` the K-types' integer sub-block scale, folded into the integer
//!   sum as llama.cpp folds it (1 for the 32-blocks).
//! - `M = Σ_g mn_g · Σ_{e ∈ g} qx_e` (Q4_K, Q5_K, Q2_K: the integer minimums, through
//!   the activations' 16-sums), exact.
//! - One f32 chain per output, block after block:
//!   - Q4_0, Q5_0, Q8_0, IQ4_NL: `acc = fma(d · dx, S, acc)`;
//!   - Q4_1, Q5_1: that, then `acc = fma(m, s, acc)` with `s = f16(dx · Σ qx)` as
//!     llama.cpp's activation block keeps it;
//!   - Q6_K, Q3_K, IQ4_XS: `acc = fma(d · S, dx, acc)`;
//!   - Q4_K, Q5_K, Q2_K: `acc = fma(fma(−dmin, M, d · S), dx, acc)`.
//!
//!   The K-types' chain is llama.cpp's own tiled order (`dot_k45_tiled`,
//!   `dot_q6_k_tiled`, `dot_k16_tiled` in the twins: its product for prompts of 8 rows
//!   or more); the 32-blocks' is its repacked IQ4_NL order. Against exact mode's
//!   one-token order (eight lanes per block, summed at the end), only the order of the
//!   per-block f32 rescales differs: the integers are the same.
//!
//! A row's numbers depend on that row and the weights only (the activation scales are
//! per row and block, the order fixed), so batch invariance holds; and every
//! instruction-set path computes the same integers and the same f32 operations in the
//! same order, so every path gives the plain twin's bits.
//!
//! # The kernels
//!
//! W is packed once in panels of 16 rows (the 16 lanes of a 512-bit vector). The
//! AVX-512 VNNI kernel (`vnni::panel`) keeps one panel's outputs for a tile of up to
//! [`TILE`] activation rows in registers: per 4 numbers one 64-byte load of the 16 rows'
//! integers and, per activation row, one `vpdpbusd` with its 4 bytes broadcast (as
//! unsigned bytes qx + 128, the shift `128 · Σ w` taken back out per block), so each
//! weight is read once for the whole tile, with no nibble unpacking and no horizontal
//! sums; the f32 steps run lane by lane. The plain twin ([`row_dots`], one row at a
//! time) reads like the formula; compiled with AVX2 + FMA it is the AVX2 level's path.

use crate::ops::quant::activations::{quantize_rows, QuantizedActs};
use crate::ops::quant::dequant::iq4_indices;
use crate::ops::quant::reference::K16Block;
use crate::ops::quant::QMatrix;
use crate::runtime::Isa;
use crate::tensor::quant::{
    blocks, f16_value, k_scale_min, Block, BlockIQ4_NL, BlockIQ4_XS, BlockQ2_K, BlockQ3_K,
    BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0,
    GgmlType, KVALUES_IQ4NL,
};
use crate::{Error, Result};

/// Numbers of a group: the K-types' scales and minimums are per 16 (Q4_K / Q5_K's per
/// 32 repeated for both halves, which changes no integer).
const GROUP: usize = 16;
/// Activation rows one pass over a weight row serves.
const TILE: usize = 8;
/// Multiply-adds from which a product is split over threads.
const PARALLEL_MIN: usize = 1 << 20;

/// How a block's integer sums meet its f32 scales (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `fma(d · dx, S, acc)`.
    Scale32,
    /// `fma(d · dx, S, acc)`, then `fma(m, s, acc)`.
    ScaleMin32,
    /// `fma(d · S, dx, acc)`.
    ScaleK,
    /// `fma(fma(−dmin, M, d · S), dx, acc)`.
    ScaleMinK,
}

/// A GGUF weight matrix W (n × k) kept as its blocks' integers, one `i8` per weight,
/// with the blocks' f32 scales and the K-types' integer sub-block scales and minimums:
/// what a decoder's products read in int8 ([`BlockInt8Matrix::matmul`]). Rows are
/// packed in panels of 16 (the kernels' lanes): per panel, for every 4 numbers, the 16
/// rows' 4 bytes side by side (64 bytes); the per-block and per-group parts likewise
/// 16 rows side by side.
#[derive(Clone, Debug)]
pub struct BlockInt8Matrix {
    dtype: GgmlType,
    form: Form,
    n: usize,
    k: usize,
    /// Numbers of a block (32 or 256).
    block: usize,
    /// The weights' integers w: panel P, number e, row c of the panel at
    /// `16 k P + 64 (e / 4) + 4 c + e % 4` (rows past n are zeros).
    ints: Vec<i8>,
    /// Per group of 16: the integer scale sc (K-types; empty for the 32-blocks), at
    /// `16 (P · k/16 + g) + c`.
    scales: Vec<i16>,
    /// Per group of 16: the integer minimum mn (Q4_K, Q5_K, Q2_K; else empty), as `scales`.
    mins: Vec<i16>,
    /// Per block: the scale d as f32, at `16 (P · k/block + i) + c`.
    d: Vec<f32>,
    /// Per block: the `_1` types' m or the K-types' dmin as f32 (else empty), as `d`.
    m: Vec<f32>,
    /// Per block: `128 · Σ_g sc_g · Σ_{e ∈ g} w_e` (sc 1 for the 32-blocks), as `d`:
    /// the VNNI kernel's shift (activations + 128 as unsigned bytes) taken back out.
    shift: Vec<i32>,
}

/// Rows of a panel.
const NR: usize = 16;

/// One block of a row, widened: `(d, m or dmin)` and its integers, group scales and
/// minimums written into the given slices.
type Widen = fn(&[u8], &mut [i8], &mut [i16], &mut [i16]) -> (f32, f32);

/// The 32 four-bit numbers of a 32-block (low nibbles first), each with `fifth(j)`·16
/// added.
fn nibbles(qs: &[u8; 16], fifth: impl Fn(usize) -> u8) -> [u8; 32] {
    std::array::from_fn(|j| {
        let q = if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        };
        q | (fifth(j) << 4)
    })
}

/// The first block of `bytes` as a `B`.
fn one<B: Block>(bytes: &[u8]) -> &B {
    &blocks::<B>(bytes)[0]
}

fn widen_q4_0(b: &[u8], w: &mut [i8], _: &mut [i16], _: &mut [i16]) -> (f32, f32) {
    let b = one::<BlockQ4_0>(b);
    for (w, q) in w.iter_mut().zip(nibbles(&b.qs, |_| 0)) {
        *w = q as i8 - 8;
    }
    (f16_value(b.d), 0.0)
}

fn widen_q4_1(b: &[u8], w: &mut [i8], _: &mut [i16], _: &mut [i16]) -> (f32, f32) {
    let b = one::<BlockQ4_1>(b);
    for (w, q) in w.iter_mut().zip(nibbles(&b.qs, |_| 0)) {
        *w = q as i8;
    }
    (f16_value(b.d), f16_value(b.m))
}

fn widen_q5_0(b: &[u8], w: &mut [i8], _: &mut [i16], _: &mut [i16]) -> (f32, f32) {
    let b = one::<BlockQ5_0>(b);
    let qh = b.high_bits();
    for (w, q) in w.iter_mut().zip(nibbles(&b.qs, |j| ((qh >> j) & 1) as u8)) {
        *w = q as i8 - 16;
    }
    (f16_value(b.d), 0.0)
}

fn widen_q5_1(b: &[u8], w: &mut [i8], _: &mut [i16], _: &mut [i16]) -> (f32, f32) {
    let b = one::<BlockQ5_1>(b);
    let qh = b.high_bits();
    for (w, q) in w.iter_mut().zip(nibbles(&b.qs, |j| ((qh >> j) & 1) as u8)) {
        *w = q as i8;
    }
    (f16_value(b.d), f16_value(b.m))
}

fn widen_q8_0(b: &[u8], w: &mut [i8], _: &mut [i16], _: &mut [i16]) -> (f32, f32) {
    let b = one::<BlockQ8_0>(b);
    w.copy_from_slice(&b.qs);
    (f16_value(b.d), 0.0)
}

fn widen_iq4_nl(b: &[u8], w: &mut [i8], _: &mut [i16], _: &mut [i16]) -> (f32, f32) {
    let b = one::<BlockIQ4_NL>(b);
    for (w, q) in w.iter_mut().zip(iq4_indices(&b.qs)) {
        *w = KVALUES_IQ4NL[q as usize];
    }
    (f16_value(b.d), 0.0)
}

/// Q4_K (`FIVE` false) and Q5_K: number `32 j + l` is nibble `j % 2` of
/// `qs[32 (j / 2) + l]` (and bit j of `qh[l]`), sub-block j's 6-bit scale and minimum
/// for both its groups of 16.
fn widen_k45<const FIVE: bool>(
    b: &[u8],
    w: &mut [i8],
    sc: &mut [i16],
    mn: &mut [i16],
) -> (f32, f32) {
    let (d, dmin, scales, qs, qh) = if FIVE {
        let b = one::<BlockQ5_K>(b);
        (b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh))
    } else {
        let b = one::<BlockQ4_K>(b);
        (b.d, b.dmin, &b.scales, &b.qs, None)
    };
    for j in 0..8 {
        let (s, m) = k_scale_min(j, scales);
        sc[2 * j..2 * j + 2].fill(s as i16);
        mn[2 * j..2 * j + 2].fill(m as i16);
        for l in 0..32 {
            let byte = qs[32 * (j / 2) + l];
            let mut q = if j % 2 == 0 { byte & 0x0F } else { byte >> 4 };
            if let Some(qh) = qh {
                q |= ((qh[l] >> j) & 1) << 4;
            }
            w[32 * j + l] = q as i8;
        }
    }
    (f16_value(d), f16_value(dmin))
}

fn widen_q6_k(b: &[u8], w: &mut [i8], sc: &mut [i16], _: &mut [i16]) -> (f32, f32) {
    let b = one::<BlockQ6_K>(b);
    for (e, w) in w.iter_mut().enumerate() {
        let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
        let lb = b.ql[64 * n + 32 * (k % 2) + l];
        let lo = if k < 2 { lb & 0x0F } else { lb >> 4 };
        let hi = (b.qh[32 * n + l] >> (2 * k)) & 3;
        *w = (lo | (hi << 4)) as i8 - 32;
    }
    for (s, &v) in sc.iter_mut().zip(&b.scales) {
        *s = v as i16;
    }
    (f16_value(b.d), 0.0)
}

/// Q2_K, Q3_K and IQ4_XS through the twins' reading of them ([`K16Block`]).
fn widen_k16<B: K16Block>(b: &[u8], w: &mut [i8], sc: &mut [i16], mn: &mut [i16]) -> (f32, f32) {
    let b = one::<B>(b);
    for (w, v) in w.iter_mut().zip(b.ints()) {
        *w = v as i8;
    }
    let (s, m) = b.groups();
    for (d, v) in sc.iter_mut().zip(s) {
        *d = v as i16;
    }
    if B::HAS_MIN {
        for (d, v) in mn.iter_mut().zip(m) {
            *d = v as i16;
        }
    }
    b.scales_f32()
}

/// The form and the block widening of `dtype`; None for the float types.
fn layout(dtype: GgmlType) -> Option<(Form, Widen)> {
    Some(match dtype {
        GgmlType::Q4_0 => (Form::Scale32, widen_q4_0),
        GgmlType::Q4_1 => (Form::ScaleMin32, widen_q4_1),
        GgmlType::Q5_0 => (Form::Scale32, widen_q5_0),
        GgmlType::Q5_1 => (Form::ScaleMin32, widen_q5_1),
        GgmlType::Q8_0 => (Form::Scale32, widen_q8_0),
        GgmlType::IQ4_NL => (Form::Scale32, widen_iq4_nl),
        GgmlType::Q4_K => (Form::ScaleMinK, widen_k45::<false>),
        GgmlType::Q5_K => (Form::ScaleMinK, widen_k45::<true>),
        GgmlType::Q6_K => (Form::ScaleK, widen_q6_k),
        GgmlType::Q2_K => (Form::ScaleMinK, widen_k16::<BlockQ2_K>),
        GgmlType::Q3_K => (Form::ScaleK, widen_k16::<BlockQ3_K>),
        GgmlType::IQ4_XS => (Form::ScaleK, widen_k16::<BlockIQ4_XS>),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => return None,
    })
}

impl BlockInt8Matrix {
    /// Widen `w`'s blocks once: each weight's integer as an `i8`, the blocks' scales as
    /// f32 (exactly: they are f16 in the file), the K-types' sub-block scales and
    /// minimums as integers. Errors for the float types (F32, F16, BF16), which have no
    /// block integers (`Int8Matrix` quantises those per row).
    pub fn widen(w: &QMatrix) -> Result<BlockInt8Matrix> {
        let dtype = w.dtype();
        let (form, widen) = layout(dtype).ok_or_else(|| {
            Error::Argument(format!(
                "per-block int8 needs a quantised block type; {dtype} weights have none \
                 (they are quantised per row instead)"
            ))
        })?;
        let (n, k) = (w.rows(), w.cols());
        let block = dtype.block_len();
        let (nb, ng) = (k / block, k / GROUP);
        let k_type = matches!(form, Form::ScaleK | Form::ScaleMinK);
        let has_m = matches!(form, Form::ScaleMin32 | Form::ScaleMinK);
        let has_mins = form == Form::ScaleMinK;
        let panels = n.div_ceil(NR);
        let mut m = BlockInt8Matrix {
            dtype,
            form,
            n,
            k,
            block,
            ints: vec![0; panels * NR * k],
            scales: vec![0; if k_type { panels * NR * ng } else { 0 }],
            mins: vec![0; if has_mins { panels * NR * ng } else { 0 }],
            d: vec![0.0; panels * NR * nb],
            m: vec![0.0; if has_m { panels * NR * nb } else { 0 }],
            shift: vec![0; panels * NR * nb],
        };
        let bb = dtype.block_bytes();
        let gpb = block / GROUP;
        let (mut wi, mut sc, mut mn) = (vec![0i8; block], vec![1i16; gpb], vec![0i16; gpb]);
        for j in 0..n {
            let (p, c) = (j / NR, j % NR);
            let row = w.row_bytes_of(j);
            for (i, bytes) in row.chunks_exact(bb).enumerate() {
                sc.fill(1);
                let (d, dm) = widen(bytes, &mut wi, &mut sc, &mut mn);
                let at = NR * (p * nb + i) + c;
                m.d[at] = d;
                if has_m {
                    m.m[at] = dm;
                }
                let mut shift = 0i32;
                for (g, run) in wi.chunks_exact(GROUP).enumerate() {
                    shift += sc[g] as i32 * run.iter().map(|&v| v as i32).sum::<i32>();
                    let ga = NR * (p * ng + i * gpb + g) + c;
                    if k_type {
                        m.scales[ga] = sc[g];
                    }
                    if has_mins {
                        m.mins[ga] = mn[g];
                    }
                }
                m.shift[at] = 128 * shift;
                for (e, &v) in wi.iter().enumerate() {
                    let e = i * block + e;
                    m.ints[NR * k * p + 64 * (e / 4) + 4 * c + e % 4] = v;
                }
            }
        }
        Ok(m)
    }

    /// Output features (rows of W).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input features (columns of W).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The block type the integers came from.
    pub fn dtype(&self) -> GgmlType {
        self.dtype
    }

    /// Bytes held (integers, scales, minimums).
    pub fn bytes(&self) -> usize {
        self.ints.len()
            + 2 * (self.scales.len() + self.mins.len())
            + 4 * (self.d.len() + self.m.len() + self.shift.len())
    }

    /// C = A · Wᵀ + b: each row of A quantised with llama.cpp's rule for W's block type
    /// (per block of 32 or 256), then the module docs' arithmetic, on the runtime's
    /// instruction-set level, split over its threads (which changes no number).
    ///
    /// Panics if the sizes disagree (an internal invariant: `Linear` checks x first).
    ///
    /// # Shapes
    /// c: (m, n), a: (m, k), bias: (n)
    pub fn matmul(&self, c: &mut [f32], a: &[f32], bias: Option<&[f32]>, m: usize) -> Result<()> {
        self.matmul_on(crate::runtime::isa(), c, a, bias, m)
    }

    /// [`BlockInt8Matrix::matmul`] at `isa` (which the CPU must run).
    fn matmul_on(
        &self,
        isa: Isa,
        c: &mut [f32],
        a: &[f32],
        bias: Option<&[f32]>,
        m: usize,
    ) -> Result<()> {
        let (n, k) = (self.n, self.k);
        assert!(
            c.len() == m * n && a.len() == m * k && bias.is_none_or(|b| b.len() == n),
            "BlockInt8Matrix::matmul sizes: c {}, a {} for m {m}, k {k}, n {n}",
            c.len(),
            a.len()
        ); // ok: internal invariant
        if m == 0 || n == 0 {
            return Ok(());
        }
        // Each row quantised once for every weight row, as llama.cpp quantises it.
        let acts: Vec<QuantizedActs> = a
            .chunks_exact(k.max(1))
            .map(|row| quantize_rows(self.dtype, row, isa))
            .collect::<Result<_>>()?;
        // The activations as unsigned bytes (qx + 128) for vpdpbusd, (m, k).
        let vnni = cfg!(target_arch = "x86_64") && isa >= Isa::Avx512;
        let xu: Vec<u8> = if vnni {
            acts.iter()
                .flat_map(|a| a.qs.iter().map(|&q| (q as u8) ^ 0x80))
                .collect()
        } else {
            Vec::new()
        };
        // Per panel of 16 weight rows, per activation row, its 16 outputs: (panels, m, 16).
        let panels = n.div_ceil(NR);
        let mut ct = vec![0.0f32; panels * m * NR];
        let run = |p: usize, out: &mut [f32]| {
            for (t, out) in out.chunks_mut(TILE * NR).enumerate() {
                let rows = t * TILE..(t * TILE + TILE).min(m);
                #[cfg(target_arch = "x86_64")]
                if vnni {
                    // SAFETY: the runtime caps the level to what the CPU runs; the
                    // panel, rows and out are inside the matrix and buffers (sizes above).
                    unsafe { vnni::panel(self, p, &acts[rows.clone()], &xu, rows.start, out) };
                    continue;
                }
                #[cfg(target_arch = "x86_64")]
                if isa >= Isa::Avx2 {
                    // SAFETY: as above.
                    unsafe { panel_avx2(self, p, &acts[rows], out) };
                    continue;
                }
                panel_plain(self, p, &acts[rows], out);
            }
        };
        let workers = crate::threads::threads();
        if workers <= 1 || m * n * k < PARALLEL_MIN {
            for (p, out) in ct.chunks_exact_mut(m * NR).enumerate() {
                run(p, out);
            }
        } else {
            let per = panels.div_ceil(workers * 4).max(1);
            crate::threads::for_each_chunk_mut(&mut ct, per * m * NR, |t, chunk| {
                for (pp, out) in chunk.chunks_exact_mut(m * NR).enumerate() {
                    run(t * per + pp, out);
                }
            });
        }
        for (r, crow) in c.chunks_exact_mut(n).enumerate() {
            for (j, v) in crow.iter_mut().enumerate() {
                let y = ct[(j / NR * m + r) * NR + j % NR];
                *v = match bias {
                    Some(b) => y + b[j],
                    None => y,
                };
            }
        }
        Ok(())
    }

    /// Row j's parts, gathered from its panel (the twin's reading).
    fn row(&self, j: usize) -> Row {
        let (k, nb, ng) = (self.k, self.k / self.block, self.k / GROUP);
        let (p, c) = (j / NR, j % NR);
        let per_block = |v: &[f32]| -> Vec<f32> {
            if v.is_empty() {
                Vec::new()
            } else {
                (0..nb).map(|i| v[NR * (p * nb + i) + c]).collect()
            }
        };
        let per_group = |v: &[i16]| -> Vec<i16> {
            if v.is_empty() {
                Vec::new()
            } else {
                (0..ng).map(|g| v[NR * (p * ng + g) + c]).collect()
            }
        };
        Row {
            form: self.form,
            block: self.block,
            ints: (0..k)
                .map(|e| self.ints[NR * k * p + 64 * (e / 4) + 4 * c + e % 4])
                .collect(),
            scales: per_group(&self.scales),
            mins: per_group(&self.mins),
            d: per_block(&self.d),
            m: per_block(&self.m),
        }
    }
}

/// One weight row's parts, as [`row_dots`] reads them.
struct Row {
    form: Form,
    block: usize,
    ints: Vec<i8>,
    scales: Vec<i16>,
    mins: Vec<i16>,
    d: Vec<f32>,
    m: Vec<f32>,
}

/// Panel `p` against a tile of activation rows, by the twin: `out[16 r + c]` is row
/// `16 p + c`'s output for activation row r (rows past n give 0).
fn panel_plain(w: &BlockInt8Matrix, p: usize, acts: &[QuantizedActs], out: &mut [f32]) {
    for c in 0..NR.min(w.n - p * NR) {
        let row = w.row(p * NR + c);
        let mut o = [0.0f32; TILE];
        row_dots(&row, acts, &mut o[..acts.len()]);
        for (r, v) in o[..acts.len()].iter().enumerate() {
            out[NR * r + c] = *v;
        }
    }
}

/// [`panel_plain`] compiled for AVX2 + FMA (the integer dots vectorised).
///
/// # Safety
/// The CPU runs AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_avx2(w: &BlockInt8Matrix, p: usize, acts: &[QuantizedActs], out: &mut [f32]) {
    for c in 0..NR.min(w.n - p * NR) {
        let row = w.row(p * NR + c);
        let mut o = [0.0f32; TILE];
        row_dots(&row, acts, &mut o[..acts.len()]);
        for (r, v) in o[..acts.len()].iter().enumerate() {
            out[NR * r + c] = *v;
        }
    }
}

/// `Σ w · x` over 16 numbers, exact.
#[inline(always)]
fn dot16(w: &[i8], x: &[i8]) -> i32 {
    let mut s = 0i32;
    for (&w, &x) in w[..GROUP].iter().zip(&x[..GROUP]) {
        s += w as i32 * x as i32;
    }
    s
}

/// Weight row `w` against up to [`TILE`] activation rows: out[r] = the module docs'
/// chain for row r. The body every level compiles; its plain compilation is the twin.
#[inline(always)]
fn row_dots(w: &Row, acts: &[QuantizedActs], out: &mut [f32]) {
    let mut acc = [0.0f32; TILE];
    let gpb = w.block / GROUP;
    for (i, wb) in w.ints.chunks_exact(w.block).enumerate() {
        let d = w.d[i];
        for (r, a) in acts.iter().enumerate() {
            let xb = &a.qs[i * w.block..(i + 1) * w.block];
            let dx = a.d[i];
            acc[r] = match w.form {
                Form::Scale32 | Form::ScaleMin32 => {
                    let s = dot16(wb, xb) + dot16(&wb[GROUP..], &xb[GROUP..]);
                    let acc = (d * dx).mul_add(s as f32, acc[r]);
                    if w.form == Form::ScaleMin32 {
                        w.m[i].mul_add(a.sum[i], acc)
                    } else {
                        acc
                    }
                }
                Form::ScaleK | Form::ScaleMinK => {
                    let sc = &w.scales[i * gpb..(i + 1) * gpb];
                    let mut s = 0i32;
                    for (g, &scale) in sc.iter().enumerate() {
                        let at = g * GROUP;
                        s += scale as i32 * dot16(&wb[at..], &xb[at..]);
                    }
                    if w.form == Form::ScaleK {
                        (d * s as f32).mul_add(dx, acc[r])
                    } else {
                        let mn = &w.mins[i * gpb..(i + 1) * gpb];
                        let bs = &a.bsums[i * gpb..(i + 1) * gpb];
                        let mut m = 0i32;
                        for (&mn, &b) in mn.iter().zip(bs) {
                            m += mn as i32 * b;
                        }
                        (-w.m[i])
                            .mul_add(m as f32, d * s as f32)
                            .mul_add(dx, acc[r])
                    }
                }
            };
        }
    }
    out.copy_from_slice(&acc[..out.len()]);
}

/// The AVX-512 VNNI kernel: one panel of 16 weight rows in the 16 lanes, `vpdpbusd`
/// of the activations' unsigned bytes (qx + 128, broadcast four at a time) with the
/// rows' integers, the shift taken back out per block, the K-types' group scales and
/// minimums as i32 lane products; then the module docs' f32 steps lane by lane, the
/// twin's operations in the twin's order.
#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{BlockInt8Matrix, Form, GROUP, NR, TILE};
    use crate::ops::quant::activations::QuantizedActs;

    /// Panel `p` against `acts` (rows `r0..` of the product; `xu` every row's unsigned
    /// bytes, (m, k)): `out[16 r + c]` as [`super::panel_plain`] writes it.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `p` a panel of `w`, `acts.len() ≤ TILE`, `xu` holds rows
    /// `r0..r0 + acts.len()` of k bytes, `out` at least `16 · acts.len()` numbers.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn panel(
        w: &BlockInt8Matrix,
        p: usize,
        acts: &[QuantizedActs],
        xu: &[u8],
        r0: usize,
        out: &mut [f32],
    ) {
        match acts.len() {
            1 => unsafe { tile::<1>(w, p, acts, xu, r0, out) },
            2 => unsafe { tile::<2>(w, p, acts, xu, r0, out) },
            3 => unsafe { tile::<3>(w, p, acts, xu, r0, out) },
            4 => unsafe { tile::<4>(w, p, acts, xu, r0, out) },
            5 => unsafe { tile::<5>(w, p, acts, xu, r0, out) },
            6 => unsafe { tile::<6>(w, p, acts, xu, r0, out) },
            7 => unsafe { tile::<7>(w, p, acts, xu, r0, out) },
            _ => unsafe { tile::<TILE>(w, p, acts, xu, r0, out) },
        }
    }

    /// [`panel`] for `R` activation rows.
    ///
    /// # Safety
    /// As [`panel`], with `acts.len() == R`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile<const R: usize>(
        w: &BlockInt8Matrix,
        p: usize,
        acts: &[QuantizedActs],
        xu: &[u8],
        r0: usize,
        out: &mut [f32],
    ) {
        let (k, block) = (w.k, w.block);
        let (nb, ng, gpb) = (k / block, k / GROUP, block / GROUP);
        let ints = w.ints[NR * k * p..NR * k * (p + 1)].as_ptr();
        let xrow: [*const u8; R] = std::array::from_fn(|r| xu[(r0 + r) * k..].as_ptr());
        let mut acc = [_mm512_setzero_ps(); R];
        for i in 0..nb {
            let at = NR * (p * nb + i);
            let mut s = [_mm512_setzero_si512(); R];
            if w.form == Form::Scale32 || w.form == Form::ScaleMin32 {
                for q in 0..block / 4 {
                    let e = i * block + 4 * q;
                    // SAFETY: e + 4 ≤ k inside the panel's 16 k bytes and each row's k.
                    let wv = unsafe { _mm512_loadu_si512(ints.add(64 * (e / 4)).cast()) };
                    for r in 0..R {
                        let x4 = unsafe { xrow[r].add(e).cast::<i32>().read_unaligned() };
                        s[r] = _mm512_dpbusd_epi32(s[r], _mm512_set1_epi32(x4), wv);
                    }
                }
            } else {
                for g in 0..gpb {
                    let mut sg = [_mm512_setzero_si512(); R];
                    for q in 0..GROUP / 4 {
                        let e = i * block + g * GROUP + 4 * q;
                        // SAFETY: as above.
                        let wv = unsafe { _mm512_loadu_si512(ints.add(64 * (e / 4)).cast()) };
                        for r in 0..R {
                            let x4 = unsafe { xrow[r].add(e).cast::<i32>().read_unaligned() };
                            sg[r] = _mm512_dpbusd_epi32(sg[r], _mm512_set1_epi32(x4), wv);
                        }
                    }
                    let ga = NR * (p * ng + i * gpb + g);
                    // SAFETY: 16 i16 scales of this panel's group.
                    let sc = unsafe {
                        _mm512_cvtepi16_epi32(_mm256_loadu_si256(w.scales.as_ptr().add(ga).cast()))
                    };
                    for r in 0..R {
                        s[r] = _mm512_add_epi32(s[r], _mm512_mullo_epi32(sg[r], sc));
                    }
                }
            }
            // SAFETY: 16 numbers of this panel's block in each per-block part.
            let shift = unsafe { _mm512_loadu_si512(w.shift.as_ptr().add(at).cast()) };
            let d = unsafe { _mm512_loadu_ps(w.d.as_ptr().add(at)) };
            for r in 0..R {
                let a = &acts[r];
                let dx = _mm512_set1_ps(a.d[i]);
                let sf = _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r], shift));
                acc[r] = match w.form {
                    Form::Scale32 => _mm512_fmadd_ps(_mm512_mul_ps(d, dx), sf, acc[r]),
                    Form::ScaleMin32 => {
                        let m = unsafe { _mm512_loadu_ps(w.m.as_ptr().add(at)) };
                        let t = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), sf, acc[r]);
                        _mm512_fmadd_ps(m, _mm512_set1_ps(a.sum[i]), t)
                    }
                    Form::ScaleK => _mm512_fmadd_ps(_mm512_mul_ps(d, sf), dx, acc[r]),
                    Form::ScaleMinK => {
                        let mut mi = _mm512_setzero_si512();
                        for g in 0..gpb {
                            let ga = NR * (p * ng + i * gpb + g);
                            // SAFETY: 16 i16 minimums of this panel's group.
                            let mn = unsafe {
                                _mm512_cvtepi16_epi32(_mm256_loadu_si256(
                                    w.mins.as_ptr().add(ga).cast(),
                                ))
                            };
                            let b = _mm512_set1_epi32(a.bsums[i * gpb + g]);
                            mi = _mm512_add_epi32(mi, _mm512_mullo_epi32(mn, b));
                        }
                        let dmin = unsafe { _mm512_loadu_ps(w.m.as_ptr().add(at)) };
                        // −dmin, the sign bit flipped (as the twin's negation; 0 − dmin
                        // would give +0 for +0).
                        let sign = _mm512_set1_epi32(i32::MIN);
                        let neg =
                            _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dmin), sign));
                        let rr = _mm512_fmadd_ps(neg, _mm512_cvtepi32_ps(mi), _mm512_mul_ps(d, sf));
                        _mm512_fmadd_ps(rr, dx, acc[r])
                    }
                };
            }
        }
        for (r, v) in acc.iter().enumerate() {
            // SAFETY: out holds 16 numbers per activation row.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(NR * r), *v) };
        }
    }
}

#[cfg(test)]
mod tests {
    use half::f16;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::ops::quant::reference;
    use crate::runtime::Runtime;
    use crate::tensor::quant::ActKind;

    /// Random blocks of `t` with finite scales in (−0.1, 0.1) (random bytes elsewhere).
    fn random_matrix(t: GgmlType, n: usize, k: usize, rng: &mut StdRng) -> Result<QMatrix> {
        let mut b: Vec<u8> = (0..t.row_bytes(k)? * n).map(|_| rng.random()).collect();
        let offsets: &[usize] = match t {
            GgmlType::Q6_K => &[208],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q3_K => &[108],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            _ => &[0],
        };
        for blk in b.chunks_exact_mut(t.block_bytes()) {
            for &at in offsets {
                let h = f16::from_f32(rng.random_range(-0.1f32..0.1))
                    .to_bits()
                    .to_le_bytes();
                blk[at..at + 2].copy_from_slice(&h);
            }
        }
        QMatrix::from_vec(t, n, k, b)
    }

    const TYPES: [GgmlType; 12] = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_XS,
    ];

    /// The widened integers stand for the file's numbers: `dequantize` of each row
    /// equals the blocks rebuilt from the integers and scales, to the bit.
    #[test]
    fn widened_blocks_hold_the_files_numbers() -> Result<()> {
        let mut rng = StdRng::seed_from_u64(3);
        for t in TYPES {
            assert!(
                matches!(t.activation_kind(), ActKind::Q8_0 | ActKind::Q8_K),
                "{t}"
            );
            let q = random_matrix(t, 3, 512, &mut rng)?;
            let w = BlockInt8Matrix::widen(&q)?;
            let want = q.dequantize_all()?;
            for j in 0..w.n {
                let row = w.row(j);
                for e in 0..w.k {
                    let (i, g) = (e / w.block, e / GROUP);
                    let d = row.d[i];
                    let q = row.ints[e] as f32;
                    let got = match w.form {
                        Form::Scale32 => d * q,
                        Form::ScaleMin32 => d * q + row.m[i],
                        Form::ScaleK => d * row.scales[g] as f32 * q,
                        Form::ScaleMinK => {
                            d * row.scales[g] as f32 * q - row.m[i] * row.mins[g] as f32
                        }
                    };
                    let want = want[j * w.k + e];
                    assert!(
                        (got - want).abs() <= 1e-6 * want.abs().max(1e-3),
                        "{t} row {j} number {e}: {got} vs {want}"
                    );
                }
            }
        }
        Ok(())
    }

    /// The K-types give llama.cpp's tiled product bit for bit (the twins'
    /// `dot_k45_tiled`, `dot_q6_k_tiled`, `dot_k16_tiled`), and the 32-blocks without a
    /// minimum its repacked IQ4_NL order (`dot_iq4_nl_repacked`'s chain): the same
    /// integers, the same rescales.
    #[test]
    fn k_types_equal_llama_cpps_tiled_order() -> Result<()> {
        let mut rng = StdRng::seed_from_u64(5);
        for t in TYPES {
            let (n, k) = (5, 512);
            let q = random_matrix(t, n, k, &mut rng)?;
            let w = BlockInt8Matrix::widen(&q)?;
            let x: Vec<f32> = (0..k).map(|_| rng.random_range(-2.0f32..2.0)).collect();
            let a = quantize_rows(t, &x, Isa::Scalar)?;
            let want: Option<Vec<f32>> = match t {
                GgmlType::Q4_1 | GgmlType::Q5_1 => None,
                GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => None,
                _ => {
                    let (one, _) = reference::tiled_kernels(t)
                        .ok_or_else(|| Error::Argument(format!("{t} has no tiled twin")))?;
                    Some((0..n).map(|j| one(q.row_bytes_of(j), &a)).collect())
                }
            };
            let mut got = vec![0.0f32; n];
            w.matmul_on(Isa::Scalar, &mut got, &x, None, 1)?;
            if let Some(want) = want {
                for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{t} row {j}: {g} vs {w}");
                }
            }
            if t == GgmlType::IQ4_NL {
                for (j, g) in got.iter().enumerate() {
                    let want = reference::dot_iq4_nl_repacked(q.row_bytes_of(j), &a);
                    assert_eq!(g.to_bits(), want.to_bits(), "{t} row {j}");
                }
            }
        }
        Ok(())
    }

    /// Every instruction-set level this CPU runs gives the plain twin's bits, for one
    /// row and many (tiles of 8 and a partial one), with and without a bias, on one
    /// thread and two; and a row's numbers are the same alone as among others.
    #[test]
    fn every_block_int8_level_equals_the_twin() -> Result<()> {
        let mut rng = StdRng::seed_from_u64(7);
        for t in TYPES {
            for &(m, n, k) in &[(1, 3, 256), (11, 40, 512), (20, 70, 768)] {
                let q = random_matrix(t, n, k, &mut rng)?;
                let w = BlockInt8Matrix::widen(&q)?;
                let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-3.0f32..3.0)).collect();
                let b: Vec<f32> = (0..n).map(|_| rng.random_range(-0.1f32..0.1)).collect();
                for bias in [None, Some(&b[..])] {
                    let mut want = vec![f32::NAN; m * n];
                    w.matmul_on(Isa::Scalar, &mut want, &a, bias, m)?;
                    for isa in Isa::available() {
                        for threads in [1, 2] {
                            let rt = Runtime::builder().threads(threads).isa(isa).build()?;
                            let mut got = vec![f32::NAN; m * n];
                            rt.install(|| w.matmul_on(isa, &mut got, &a, bias, m))?;
                            assert!(
                                got.iter()
                                    .zip(&want)
                                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                                "{t} {isa:?} threads {threads}: m {m} n {n} k {k}"
                            );
                        }
                    }
                    // The last row alone: its bits among the others.
                    let mut alone = vec![f32::NAN; n];
                    w.matmul_on(Isa::Scalar, &mut alone, &a[(m - 1) * k..], bias, 1)?;
                    assert!(
                        alone
                            .iter()
                            .zip(&want[(m - 1) * n..])
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{t}: a row alone differs from the same row among {m}"
                    );
                }
            }
        }
        Ok(())
    }

    /// A float type has no block integers: refused by name.
    #[test]
    fn float_types_are_refused() -> Result<()> {
        let q = QMatrix::from_vec(GgmlType::F32, 1, 4, vec![0; 16])?;
        let e = BlockInt8Matrix::widen(&q).unwrap_err().to_string();
        assert!(e.contains("f32") || e.contains("F32"), "{e}");
        Ok(())
    }
}
