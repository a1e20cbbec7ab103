//! [`QMatrix`]: a `rows × cols` weight matrix in one of the GGUF storage types, and how
//! its products are scheduled: a decoded token's product (`matvec`: the quantised rows
//! streamed once, in tiles of four rows, over the threads), a few rows' (the decode step
//! of several sequences: each tile unpacked once for all of them, on AVX-512 with
//! GFNI), a prompt's (`matmul_t_quantized`: weight rows in L1-sized blocks that every
//! activation row meets, paired on AVX-512),
//! several matrices over one input at once (`matvec_group`, `matmul_t_quantized_group`),
//! and the dequantised tiles through the f32 GEMM (`matmul_t`). Which kernels run is
//! [`super::dispatch`]'s choice at the runtime's instruction-set level; the threads are
//! the runtime's ([`crate::threads`]).

use std::cell::RefCell;
use std::fmt;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

use crate::ops::quant::activations::{quantize_activations, quantize_rows, QuantizedActs};
use crate::ops::quant::dequant::dequantize;
#[cfg(target_arch = "x86_64")]
use crate::ops::quant::dispatch::Tile;
use crate::ops::quant::dispatch::{
    chain_kernels, dot_kernel, is_repacked, repacked_kernels, takes_chain, tiled_kernels, Dot4Fn,
    DotFn, TILED_MIN_ROWS,
};
#[cfg(target_arch = "x86_64")]
use crate::ops::quant::{avx2, avx2_kgemm, avx2_kgemv, avx512};
use crate::runtime::{Isa, Numerics};
use crate::tensor::quant::{f16_value, ActKind, GgmlType, QBytes, QK, QK_K};
use crate::{Error, Result};

/// How many tasks per thread a product's weight rows are cut into, for `per_row`
/// activation rows: a decoded token's product (1) in few long runs, each read as two
/// streams from memory (SmolLM2's 2-thread decode on its team: ×1.13 with 2 instead of
/// 4, ×1.25 beside a process that keeps a CPU busy; 1 was as fast on a quiet machine but
/// gained only ×1.13 beside the busy one); a prompt's in many, so that the last task to
/// finish leaves the other threads idle only briefly (SmolLM2's 2-thread prefill: ~400 →
/// ~470 tok/s with 16 instead of 4, alternating runs).
fn tasks_per_thread(per_row: usize) -> usize {
    if per_row > UNPACKED_MAX_ROWS {
        16
    } else if per_row > 1 {
        4
    } else {
        2
    }
}

/// Whether a prompt's per-row preparation (quantisation, pairing, the transpose) of `n`
/// numbers is worth splitting over the threads.
fn split_prep(n: usize) -> bool {
    crate::threads::threads() > 1 && n >= PAR_PREP_NUMBERS
}

/// Activation rows up to which a product of the 32-block types on AVX-512 with GFNI
/// unpacks its weight tiles in registers for all rows (`avx512::decode::pair_tile`)
/// rather than decoding blocks of weight rows to memory for a prompt's paired tiles
/// (`avx512::prefill`): the decode step of up to this many sequences at once.
const UNPACKED_MAX_ROWS: usize = 16;

/// The widest group of weight rows a kernel multiplies at once (`avx512::kgemv`,
/// `avx512::kgemm`: 16; `avx2_kgemv`, `avx2_kgemm`: 8; the 32-block tiles: 4), of which
/// the threads' tasks take whole ones ([`QMatrix::row_chunk`]). Two threads' tasks
/// of 20 rows left Gemma 3's Q4_K and Q6_K prompt rows 16 – 20 of every task to the
/// four-row kernel.
const ROW_GROUP: usize = 16;

/// Numbers of a prompt's activations from which their preparation runs on the threads.
const PAR_PREP_NUMBERS: usize = 1 << 14;

/// The `cols`-long rows of `x` quantised for `dtype`, in order, over the threads when
/// there are many.
fn quantize_prompt(
    dtype: GgmlType,
    x: &[f32],
    cols: usize,
    isa: Isa,
) -> Result<Vec<QuantizedActs>> {
    if split_prep(x.len()) {
        crate::threads::map_collect(x.len() / cols, |i| {
            quantize_rows(dtype, &x[i * cols..(i + 1) * cols], isa)
        })
        .into_iter()
        .collect()
    } else {
        x.chunks_exact(cols)
            .map(|r| quantize_rows(dtype, r, isa))
            .collect()
    }
}

/// `y` (t, rows) = `yt` (rows, t) transposed, in tiles of 8 rows of `y` × 16 numbers:
/// each write fills a cache line, and the 8 lines written at a time stay within one L1
/// set's ways even when a row of `y` is a multiple of 4 KiB (a power-of-two `rows`);
/// with AVX2 at `isa`, each whole eight rows through [`transpose_eights`].
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn transpose(yt: &[f32], rows: usize, t: usize, y: &mut [MaybeUninit<f32>], isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    let avx2 = isa >= Isa::Avx2;
    // Eight rows of y (from row r0) at a time.
    let block = |r0: usize, yb: &mut [MaybeUninit<f32>]| {
        #[cfg(target_arch = "x86_64")]
        if avx2 && yb.len() == 8 * rows {
            // SAFETY: AVX2 is present (the runtime caps `isa` to the CPU's level); yb is
            // rows r0 .. r0 + 8 of y, whole.
            unsafe { transpose_eights(yt, rows, t, r0, yb) };
            return;
        }
        for i0 in (0..rows).step_by(16) {
            let i1 = (i0 + 16).min(rows);
            for (dr, yr) in yb.chunks_exact_mut(rows).enumerate() {
                for (k, v) in yr[i0..i1].iter_mut().enumerate() {
                    v.write(yt[(i0 + k) * t + r0 + dr]);
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

/// [`transpose`]'s eight rows `r0 .. r0 + 8` of y (`yb`, 8 × `rows`) from yt, eight
/// columns at a time as an 8 × 8 transpose in registers (eight rows of yt read eight
/// numbers each, eight rows of yb written eight each), the last `rows % 8` columns one
/// by one. Only moves numbers: the same bits as the plain loop.
///
/// # Safety
/// AVX2 present; `yb` holds `8 · rows` numbers and `yt` is (rows, t) with `r0 + 8 ≤ t`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_eights(
    yt: &[f32],
    rows: usize,
    t: usize,
    r0: usize,
    yb: &mut [MaybeUninit<f32>],
) {
    use std::arch::x86_64::*;
    debug_assert!(yb.len() == 8 * rows && r0 + 8 <= t && yt.len() >= rows * t);
    let whole = rows - rows % 8;
    for i0 in (0..whole).step_by(8) {
        // (8, 8): rows i0 .. i0 + 8 of yt, its columns r0 .. r0 + 8.
        let v: [__m256; 8] =
            std::array::from_fn(|k| _mm256_loadu_ps(yt.as_ptr().add((i0 + k) * t + r0)));
        let w = crate::ops::f16_dot::transpose8(v);
        for (dr, wr) in w.iter().enumerate() {
            _mm256_storeu_ps((yb.as_mut_ptr() as *mut f32).add(dr * rows + i0), *wr);
        }
    }
    for (dr, yr) in yb.chunks_exact_mut(rows).enumerate() {
        for (i, v) in yr.iter_mut().enumerate().skip(whole) {
            v.write(yt[i * t + r0 + dr]);
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

    /// Y (t, rows) over a vector's uninitialised capacity (`y`, rows · t long), for
    /// writers that together write every number of it.
    fn over_capacity(y: &'a mut [MaybeUninit<f32>], rows: usize, t: usize) -> Columns<'a> {
        debug_assert_eq!(y.len(), rows * t);
        Columns {
            ptr: y.as_mut_ptr() as *mut f32,
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

thread_local! {
    /// A prompt's (rows, t) results before their transpose to Y
    /// ([`QMatrix::tiled_rows_transposed`]), kept from product to product on the thread
    /// that runs them, as large as its largest product so far.
    static PROMPT_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The most numbers [`PROMPT_SCRATCH`] keeps (16 MiB: a 1,024-token prompt through an
/// FFN of 4,096 rows); a larger product, as rare as it is long, takes a buffer of its own
/// rather than leave the memory held for the thread's lifetime.
const SCRATCH_KEPT: usize = 1 << 22;

/// Bytes of weight rows a prompt's product keeps in L1 at a time (the paired tiles and
/// the K-quant rows).
const PAIRED_WEIGHT_BYTES: usize = 16 << 10;

/// Rows of work below which [`QMatrix::matvec`] stays on the calling thread: waking the
/// pool costs a few microseconds, more than a small product takes.
const PAR_MIN_BYTES: usize = 1 << 17;

/// How far past the rows a token's product is reading it asks the memory for the next
/// weights, in bytes ([`QMatrix::prefetch_ahead`]).
const PREFETCH_AHEAD: usize = 4096;

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
    /// The rows of the product llama.cpp computes with this matrix, which decide whether a
    /// float or IQ4_NL matrix's prompt takes tinyBLAS ([`takes_chain`]) and whether
    /// llama.cpp repacks it ([`QMatrix::repacked`]): `rows` for a whole matrix,
    /// the whole tensor's for rows of a fused one ([`QMatrix::part_of`]); None for a
    /// mixture's expert, which llama.cpp multiplies one `vec_dot` per output
    /// ([`QMatrix::expert`]).
    product_rows: Option<usize>,
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
            product_rows: Some(rows),
        })
    }

    /// This matrix as rows of a fused matrix of `total_rows` rows (a fused QKV or
    /// gate-up tensor), which llama.cpp repacks or not and multiplies as one product: a
    /// float matrix's prompt then follows that product's order (tinyBLAS when
    /// `total_rows % 4 == 0`), a Q4_K or IQ4_NL matrix is repacked when `total_rows % 8
    /// == 0`, and an IQ4_NL matrix's prompt takes tinyBLAS otherwise.
    pub fn part_of(mut self, total_rows: usize) -> QMatrix {
        self.product_rows = self.product_rows.map(|_| total_rows);
        self
    }

    /// This matrix as one expert of a mixture, which llama.cpp multiplies through
    /// `mul_mat_id`: a float (or IQ4_NL, not repacked) expert's every output is one
    /// `vec_dot`, prompts included.
    pub fn expert(mut self) -> QMatrix {
        self.product_rows = None;
        self
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
        let isa = crate::runtime::isa();
        first.check_x("matvec_group", x, 1)?;
        let a = quantize_rows(first.dtype, x, isa)?;
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
        let run =
            |_, job: &mut (&QMatrix, usize, &mut [f32])| job.0.rows_into(job.1, job.2, &a, isa);
        if parallel {
            crate::threads::for_each_mut(&mut jobs, run);
        } else {
            jobs.iter_mut().enumerate().for_each(|(i, j)| run(i, j));
        }
        Ok(ys)
    }

    /// Rows `i0 .. i0 + out.len()` of `W · x` into `out`, on the calling thread (`a`
    /// prepared for this matrix).
    fn rows_into(&self, i0: usize, out: &mut [f32], a: &QuantizedActs, isa: Isa) {
        if self.tiled(isa) {
            self.tile_rows(i0, out, std::slice::from_ref(a), isa);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.gemv_grouped(isa) {
            // SAFETY: gemv_grouped(isa) checked the level and the type; `a` was prepared for
            // this matrix (the caller's contract).
            unsafe { self.gemv_grouped_rows(i0, out, a, isa) };
            return;
        }
        let k = self.row_kernel(isa);
        for (j, y) in out.iter_mut().enumerate() {
            *y = k(self.row_bytes_of(i0 + j), a);
        }
    }

    /// y = W · x with `x` already prepared ([`QMatrix::prepare`]), written into `y` (length `rows`).
    pub fn matvec_prepared(&self, a: &QuantizedActs, y: &mut [f32]) -> Result<()> {
        self.check_prepared(a, y)?;
        let isa = crate::runtime::isa();
        if self.tiled(isa) {
            self.run_row_groups(y, 1, |i0, out| {
                self.tile_rows(i0, out, std::slice::from_ref(a), isa)
            });
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if self.gemv_grouped(isa) {
            // SAFETY: gemv_grouped(isa) checked the level and the type; `a` was checked to be
            // prepared for this matrix (check_prepared).
            self.run_row_groups(y, 1, |i0, out| unsafe {
                self.gemv_grouped_rows(i0, out, a, isa)
            });
            return Ok(());
        }
        let k = self.row_kernel(isa);
        self.run_rows(y, |i| k(self.row_bytes_of(i), a));
        Ok(())
    }

    /// Whether a token's products of this matrix take a kernel of many weight rows at
    /// once: repacked Q4_K ([`KOrder::Gemv`] order) on AVX-512 VNNI
    /// (`avx512::kgemv::q4_k_gemv16`) or AVX2 (`avx2_kgemv::q4_k_gemv8`), Q6_K (its
    /// one-row order, the same numbers) on AVX-512 VNNI (`avx512::kgemv::q6_k_gemv16`),
    /// repacked Q4_0 (its repacked order) on AVX-512 VNNI (`avx512::kgemv::q4_0_gemv16`).
    #[cfg(target_arch = "x86_64")]
    fn gemv_grouped(&self, isa: Isa) -> bool {
        (self.dtype == GgmlType::Q4_K && self.repacked() && isa >= Isa::Avx2)
            || (self.dtype == GgmlType::Q6_K && !self.repacked() && avx512::available(isa))
            || (self.dtype == GgmlType::Q4_0 && self.repacked() && avx512::available(isa))
    }

    /// Weight rows `i0 .. i0 + out.len()` times one activation row `a`, many rows a
    /// call: repacked Q4_K in the `gemv` order, sixteen rows a call of
    /// `avx512::kgemv::q4_k_gemv16` on AVX-512, eight a call of `avx2_kgemv::q4_k_gemv8`
    /// on AVX2; Q6_K sixteen rows a call of `avx512::kgemv::q6_k_gemv16`; repacked Q4_0
    /// sixteen a call of `avx512::kgemv::q4_0_gemv16`; the last rows outside those groups
    /// through the one-row kernel (the same numbers).
    ///
    /// # Safety
    /// [`QMatrix::gemv_grouped`] said yes for `isa`; `a` prepared for this matrix;
    /// `i0 + out.len() ≤ rows`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn gemv_grouped_rows(&self, i0: usize, out: &mut [f32], a: &QuantizedActs, isa: Isa) {
        /// `R` rows a call of `kernel`, then the rest one by one.
        ///
        /// # Safety
        /// `kernel` runs on this CPU and takes `R` rows of the matrix with `a`.
        unsafe fn groups<const R: usize>(
            m: &QMatrix,
            i0: usize,
            out: &mut [f32],
            a: &QuantizedActs,
            isa: Isa,
            kernel: unsafe fn([&[u8]; R], &QuantizedActs, usize) -> [f32; R],
        ) {
            let mut chunks = out.chunks_exact_mut(R);
            let mut i = i0;
            for o in &mut chunks {
                let rows: [&[u8]; R] = std::array::from_fn(|r| m.row_bytes_of(i + r));
                // SAFETY: this function's contract.
                o.copy_from_slice(&unsafe { kernel(rows, a, R * m.row_bytes) });
                i += R;
            }
            let k = m.row_kernel(isa);
            for (j, v) in chunks.into_remainder().iter_mut().enumerate() {
                *v = k(m.row_bytes_of(i + j), a);
            }
        }
        // SAFETY: gemv_grouped(isa) checked the level (each kernel's own), the type and
        // the rows; `a` is prepared for this matrix (this function's contract).
        unsafe {
            if self.dtype == GgmlType::Q6_K {
                groups(self, i0, out, a, isa, avx512::kgemv::q6_k_gemv16);
            } else if self.dtype == GgmlType::Q4_0 {
                groups(self, i0, out, a, isa, avx512::kgemv::q4_0_gemv16);
            } else if avx512::available(isa) {
                groups(self, i0, out, a, isa, avx512::kgemv::q4_k_gemv16);
            } else {
                groups(self, i0, out, a, isa, avx2_kgemv::q4_k_gemv8);
            }
        }
    }

    /// The scalar twin of [`QMatrix::matvec`] (reference dots, one thread).
    #[cfg(test)]
    pub(crate) fn matvec_reference(&self, x: &[f32]) -> Result<Vec<f32>> {
        let a = self.prepare(x)?;
        let k: DotFn = if self.repacked() {
            super::reference::repacked_kernels(self.dtype).0
        } else {
            super::reference::kernel(self.dtype)
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

    /// The per-row f32 table of block scales of a 32-block type (Q4_1, Q5_1: nb scales
    /// then nb minimums; Q4_0, Q5_0, Q8_0: nb scales), widened from the blocks' f16 once
    /// and kept (4 or 8 bytes per 32 weights). Every such block starts with its `d`,
    /// Q4_1's and Q5_1's with `m` next.
    fn scale_table(&self) -> &[f32] {
        self.scales.get_or_init(|| {
            let nb = self.cols / self.dtype.block_len().max(1);
            let two = matches!(self.dtype, GgmlType::Q4_1 | GgmlType::Q5_1);
            let bb = self.dtype.block_bytes();
            let f16_at =
                |b: &[u8], at: usize| f16_value(half::f16::from_le_bytes([b[at], b[at + 1]]));
            let mut t = Vec::with_capacity(self.rows * nb * if two { 2 } else { 1 });
            for i in 0..self.rows {
                let row = self.row_bytes_of(i);
                t.extend(row.chunks_exact(bb).map(|b| f16_at(b, 0)));
                if two {
                    t.extend(row.chunks_exact(bb).map(|b| f16_at(b, 2)));
                }
            }
            t
        })
    }

    /// Whether llama.cpp keeps this matrix repacked: a Q4_K or IQ4_NL matrix with a
    /// multiple of 8 rows, which it interleaves eight rows at a time on an AVX2 CPU and
    /// multiplies with its own kernels ([`is_repacked`]). lucent sums such a matrix's
    /// products in their order ([`KOrder::Gemv`], [`KOrder::Gemm`] for Q4_K). llama.cpp
    /// decides per tensor, so rows of a fused tensor count the whole tensor's rows (an
    /// expert its own).
    fn repacked(&self) -> bool {
        is_repacked(self.dtype, self.product_rows.unwrap_or(self.rows))
    }

    /// The dot kernel of one weight row with one activation row: a token's products,
    /// and a prompt's rows outside whole fours.
    fn row_kernel(&self, isa: Isa) -> DotFn {
        if self.repacked() {
            repacked_kernels(self.dtype, isa).0
        } else {
            dot_kernel(self.dtype, isa)
        }
    }

    /// The kernel of one weight row with four activation rows, where one reads each
    /// weight block once for four rows (the K-quants on AVX-512 and AVX2) or where
    /// llama.cpp sums four rows in its own order (repacked Q4_K, unless `numerics` asks
    /// for every row alike: then each row goes alone in the token's order, through
    /// [`QMatrix::gemv_grouped_rows`] on AVX2 and AVX-512, one at a time below).
    /// Repacked Q4_0 and IQ4_NL sum four rows as they sum one (one chain per output),
    /// so their four-row kernels serve every `numerics`.
    fn row_kernel4(&self, isa: Isa, numerics: Numerics) -> Option<Dot4Fn> {
        if self.repacked() {
            let alike = matches!(self.dtype, GgmlType::Q4_0 | GgmlType::IQ4_NL);
            return (alike || !numerics.row_invariant())
                .then(|| repacked_kernels(self.dtype, isa).1);
        }
        #[cfg(target_arch = "x86_64")]
        if avx512::available(isa) {
            return avx512::kernel4(self.dtype);
        }
        #[cfg(target_arch = "x86_64")]
        if isa >= Isa::Avx2 {
            return avx2::kernel4(self.dtype);
        }
        None
    }

    /// The kernels of a prompt product of `t` activation rows: one row and four. Like
    /// llama.cpp, a K-quant matrix it has not repacked takes its tiled order from
    /// [`TILED_MIN_ROWS`] rows on (unless `numerics` asks for every row alike).
    /// A float matrix (F32, F16, BF16) and an IQ4_NL matrix llama.cpp has not repacked
    /// take llama.cpp's tinyBLAS order where it would ([`takes_chain`]; never an
    /// expert's), one `vec_dot` per output elsewhere.
    fn prompt_kernels(&self, t: usize, isa: Isa, numerics: Numerics) -> (DotFn, Option<Dot4Fn>) {
        let chain = !numerics.row_invariant()
            && self
                .product_rows
                .is_some_and(|m| takes_chain(self.dtype, m, self.cols, t));
        if let (true, Some((k, k4))) = (chain, chain_kernels(self.dtype, isa)) {
            return (k, Some(k4));
        }
        if matches!(self.dtype, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            return (self.row_kernel(isa), None);
        }
        if t >= TILED_MIN_ROWS && !self.repacked() && !numerics.row_invariant() {
            if let Some((k, k4)) = tiled_kernels(self.dtype, isa) {
                return (k, Some(k4));
            }
        }
        (self.row_kernel(isa), self.row_kernel4(isa, numerics))
    }

    /// Whether this matrix has a tile kernel at `isa`: `avx512::decode::tile` for the
    /// 32-block types with AVX-512 VNNI, else `avx2::tile` for them with AVX2. Not a
    /// repacked Q4_0 matrix, whose products take llama.cpp's repacked order instead.
    #[allow(unused_variables)]
    fn tiled(&self, isa: Isa) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self.dtype {
                GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                    isa >= Isa::Avx2
                }
                GgmlType::Q4_0 => isa >= Isa::Avx2 && !self.repacked(),
                _ => false,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Dots of weight rows `i0..i0 + out.len() / acts.len()` with every row of `acts`,
    /// into `out` (weight-row major: `out[w * acts.len() + a]`), through the tile kernel:
    /// with AVX-512 VNNI 4 weight rows × 1 — as interleaved pairs where the CPU runs
    /// `avx512::decode::pair_tile` —, or 1 × 4 activation rows, and 1 × 1 for what is
    /// left; with AVX2 `avx2::token_rows` (one activation row) or `avx2::prompt_rows`.
    /// Only when [`QMatrix::tiled`].
    #[allow(unused_variables)]
    fn tile_rows(&self, i0: usize, out: &mut [f32], acts: &[QuantizedActs], isa: Isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: tiled(isa) checked the level for the kernel chosen here (AVX-512 VNNI
        // only when avx512::available(isa), else AVX2), and the
        // runtime caps the level to the CPU's; rows and acts were checked to be `cols`
        // numbers (check_prepared / check_x) and prepared for this type.
        unsafe {
            let vnni = avx512::available(isa);
            if !vnni {
                // AVX2: loops compiled with the tile (no call through a pointer per
                // tile), a token's rows one by one, a prompt's two weight rows × four
                // activation rows a tile. Prefill of 128 tokens at one thread, medians of
                // 3 alternating rounds, against 1 × 4 tiles called through a pointer:
                // SmolLM2 (Q4_1) 213 -> 230 tok/s, Gemma 3 (mostly Q5_0) 222 -> 259.
                let (b, rb, table) = (self.bytes.as_slice(), self.row_bytes, self.scale_table());
                if let [a] = acts {
                    match self.dtype {
                        GgmlType::Q4_0 => {
                            avx2::token_rows::<{ avx512::Q4_0 }>(b, rb, table, i0, a, out)
                        }
                        GgmlType::Q4_1 => {
                            avx2::token_rows::<{ avx512::Q4_1 }>(b, rb, table, i0, a, out)
                        }
                        GgmlType::Q5_0 => {
                            avx2::token_rows::<{ avx512::Q5_0 }>(b, rb, table, i0, a, out)
                        }
                        GgmlType::Q5_1 => {
                            avx2::token_rows::<{ avx512::Q5_1 }>(b, rb, table, i0, a, out)
                        }
                        _ => avx2::token_rows::<{ avx512::Q8_0 }>(b, rb, table, i0, a, out),
                    }
                    return;
                }
                match self.dtype {
                    GgmlType::Q4_0 => {
                        avx2::prompt_rows::<{ avx512::Q4_0 }, 2>(b, rb, table, i0, acts, out)
                    }
                    GgmlType::Q4_1 => {
                        avx2::prompt_rows::<{ avx512::Q4_1 }, 2>(b, rb, table, i0, acts, out)
                    }
                    GgmlType::Q5_0 => {
                        avx2::prompt_rows::<{ avx512::Q5_0 }, 2>(b, rb, table, i0, acts, out)
                    }
                    GgmlType::Q5_1 => {
                        avx2::prompt_rows::<{ avx512::Q5_1 }, 2>(b, rb, table, i0, acts, out)
                    }
                    _ => avx2::prompt_rows::<{ avx512::Q8_0 }, 2>(b, rb, table, i0, acts, out),
                }
                return;
            }
            if acts.len() == 1 && avx512::pairs_available(isa) {
                let (n, put) = (out.len(), |_, w: usize, v: &[f32]| {
                    out[w..w + v.len()].copy_from_slice(v)
                });
                match self.dtype {
                    GgmlType::Q4_0 => self.decode_pairs::<{ avx512::Q4_0 }>(i0, n, acts, put),
                    GgmlType::Q4_1 => self.decode_pairs::<{ avx512::Q4_1 }>(i0, n, acts, put),
                    GgmlType::Q5_0 => self.decode_pairs::<{ avx512::Q5_0 }>(i0, n, acts, put),
                    GgmlType::Q5_1 => self.decode_pairs::<{ avx512::Q5_1 }>(i0, n, acts, put),
                    _ => self.decode_pairs::<{ avx512::Q8_0 }>(i0, n, acts, put),
                }
                return;
            }
            let kernels: (Option<Tile<4, 1>>, Option<Tile<1, 4>>, Tile<1, 1>) = match self.dtype {
                GgmlType::Q4_0 => avx512::decode::tiles::<{ avx512::Q4_0 }>(),
                GgmlType::Q4_1 => avx512::decode::tiles::<{ avx512::Q4_1 }>(),
                GgmlType::Q5_0 => avx512::decode::tiles::<{ avx512::Q5_0 }>(),
                GgmlType::Q5_1 => avx512::decode::tiles::<{ avx512::Q5_1 }>(),
                _ => avx512::decode::tiles::<{ avx512::Q8_0 }>(),
            };
            self.tile_rows_with(i0, out, acts, kernels);
        }
    }

    /// Weight rows `i0 .. i0 + n` of the product with the `t` activation rows `acts`
    /// (type `K`, this matrix's; a decoded token's product when t = 1, the decode step
    /// of t sequences otherwise) through `avx512::decode::pair_tile`, four weight rows
    /// at a time, each tile unpacked once for up to eight activation rows (the
    /// activations spread once per call), and `avx512::decode::tile` for the last
    /// rows. Each result goes out through `put(a, w, values)`: activation row `a`'s
    /// results with weight rows `i0 + w ..`, one per value.
    ///
    /// # Safety
    /// `avx512::pairs_available`; every row of `acts` prepared for this matrix
    /// (check_prepared / check_x); `i0 + n ≤ rows`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn decode_pairs<const K: u8>(
        &self,
        i0: usize,
        n: usize,
        acts: &[QuantizedActs],
        mut put: impl FnMut(usize, usize, &[f32]),
    ) {
        thread_local! {
            /// This thread's spread activations, reused from product to product.
            static SPREAD: std::cell::RefCell<Vec<avx512::decode::Spread>> = Default::default();
        }
        // SAFETY: this function's contract (pairs_available, `acts` prepared for this
        // matrix), and `sps[a]` spread from `acts[a]` for K just here.
        SPREAD.with_borrow_mut(|sps| unsafe {
            let t = acts.len();
            if sps.len() < t {
                sps.resize_with(t, Default::default);
            }
            for (sp, a) in sps.iter_mut().zip(acts) {
                sp.fill::<K>(a);
            }
            let r = |w: usize| self.row_bytes_of(i0 + w);
            // A lone token of the nibble types takes eight weight rows a call (four FMA
            // chains in flight, the call's ending paid once per eight rows: Q4_1 576
            // columns from memory 26.4 → 33.6 GB/s, Q5_0 640 columns 29.7 → 33.3,
            // matvec_bench over huge pages); Q8_0 four (its 680-byte rows of Gemma 3's
            // head streamed at 27.4 GB/s eight rows a call against 33.3 four). Several
            // activation rows take four, each tile then met by up to eight of them in
            // registers.
            let width = if t == 1 && K != avx512::Q8_0 { 8 } else { 4 };
            // The tiles in order, one stream, each call prefetching the rows a few
            // tiles on. Over huge pages this is the faster from memory: Gemma 3's
            // decode +12 % at 1 and 2 threads against two streams (the first half's
            // tiles and the second's in turn, which 4 KiB pages had favoured: Q4_1 14
            // against 11 GB/s on a Zen 4); its 262144 × 640 Q8_0 head 34.1 → 38.3 GB/s
            // (`quant_bench`, medians of 3).
            let tiles = n / width;
            for tile in 0..tiles {
                let w = width * tile;
                if width == 8 {
                    let rows = std::array::from_fn(|j| r(w + j));
                    put(0, w, &pair_group::<K, 8, 1>(rows, acts, sps)[0]);
                    continue;
                }
                let rows = [r(w), r(w + 1), r(w + 2), r(w + 3)];
                let mut a = 0;
                while a < t {
                    let mut group = |o: &[[f32; 4]]| {
                        for (j, v) in o.iter().enumerate() {
                            put(a + j, w, v);
                        }
                        o.len()
                    };
                    a += match t - a {
                        8.. => group(&pair_group::<K, 4, 8>(rows, &acts[a..], &sps[a..])),
                        4.. => group(&pair_group::<K, 4, 4>(rows, &acts[a..], &sps[a..])),
                        2.. => group(&pair_group::<K, 4, 2>(rows, &acts[a..], &sps[a..])),
                        _ => group(&pair_group::<K, 4, 1>(rows, &acts[a..], &sps[a..])),
                    };
                }
            }
            // The rows past the whole tiles: a four-row tile, then one row at a time.
            let mut w = width * tiles;
            if n - w >= 4 {
                let rows = [r(w), r(w + 1), r(w + 2), r(w + 3)];
                for (a, _) in acts.iter().enumerate() {
                    let o = pair_group::<K, 4, 1>(rows, &acts[a..], &sps[a..]);
                    put(a, w, &o[0]);
                }
                w += 4;
            }
            for w in w..n {
                for (a, x) in acts.iter().enumerate() {
                    let mut o = [[0.0f32; 1]; 1];
                    avx512::decode::tile::<K, 1>([r(w)], [&[]], [x], &mut o);
                    put(a, w, &o[0]);
                }
            }
        })
    }

    /// The product with a few activation rows (`acts`, type `K`, this matrix's) into
    /// `y` (t, rows) through [`QMatrix::decode_pairs`], the weight rows split over the
    /// threads.
    ///
    /// # Safety
    /// As `decode_pairs`'.
    #[cfg(target_arch = "x86_64")]
    unsafe fn few_rows<const K: u8>(&self, y: &mut [f32], acts: &[QuantizedActs]) {
        let out = Columns::new(y, self.rows, acts.len());
        self.run_row_ranges(acts.len(), |i0, n| {
            // SAFETY: this function's contract; the task owns weight rows i0..i0 + n,
            // i.e. those columns of Y.
            unsafe { self.decode_pairs::<K>(i0, n, acts, |a, w, v| out.put(a, i0 + w, v)) }
        });
    }

    /// [`QMatrix::tile_rows`] with one type's AVX-512 kernels: 4 weight rows × 1, 1 × 4
    /// activation rows (where there is one), 1 × 1; they read the scales from the
    /// blocks, so each is given an empty scale table.
    ///
    /// # Safety
    /// As the kernels'.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_rows_with(
        &self,
        i0: usize,
        out: &mut [f32],
        acts: &[QuantizedActs],
        (k41, k14, k11): (Option<Tile<4, 1>>, Option<Tile<1, 4>>, Tile<1, 1>),
    ) {
        unsafe {
            let t = acts.len();
            let n = out.len() / t;
            let r = |w: usize| self.row_bytes_of(i0 + w);
            let sc = |_: usize| -> &[f32] { &[] };
            let mut w = 0;
            if let (1, Some(k41)) = (t, k41) {
                while w + 4 <= n {
                    // A token reads each weight once: four short rows are four streams
                    // the hardware prefetcher follows late, so the tile asks for the
                    // next rows itself (AVX-512's tile; AVX2 goes row by row, one
                    // stream: `avx2::token_rows`).
                    self.prefetch_ahead(i0 + w, 4);
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

    /// A prompt's product through `avx512::prefill::paired_tile` (type `K`, this matrix's):
    /// `y` (t, rows) from the `t` activation rows `acts` (t ≥ 2). The activation rows
    /// are paired once; the weight rows go in L1-sized blocks, each decoded once
    /// (`avx512::prefill::Decoded`) and then met by every four (or two) activation rows, four
    /// weight rows at a time. A last odd activation row takes the 1 × 1 tile.
    #[cfg(target_arch = "x86_64")]
    fn prefill_paired<const K: u8>(&self, y: &mut [f32], acts: &[QuantizedActs]) {
        let t = acts.len();
        let pair = |c: &[QuantizedActs]| avx512::prefill::Paired::new::<K>(&c[0], &c[1]);
        let pairs: Vec<avx512::prefill::Paired> = if split_prep(t * self.cols) {
            crate::threads::map_collect(t / 2, |i| pair(&acts[2 * i..2 * i + 2]))
        } else {
            acts.chunks_exact(2).map(pair).collect()
        };
        // Blocks of weight rows whose decoded form stays in L1 while every activation pair
        // passes it (the pairs then come from L2 once per block).
        let nb = self.cols / QK;
        let wb =
            (PAIRED_WEIGHT_BYTES / avx512::prefill::Decoded::row_bytes(nb).max(1)).max(4) / 4 * 4;
        let out = Columns::new(y, self.rows, t);
        self.run_row_ranges(t, |i0, n| {
            let mut dec = avx512::prefill::Decoded::default();
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
        dec: &avx512::prefill::Decoded,
        rows: Range<usize>,
        acts: &[QuantizedActs],
        pairs: &[avx512::prefill::Paired],
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
                    avx512::decode::tile::<K, 1>([self.row_bytes_of(i)], [&[]], [&acts[a]], &mut o);
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
    /// As `avx512::prefill::paired_tile`'s, and as [`Columns::put`]'s for those columns.
    #[cfg(target_arch = "x86_64")]
    unsafe fn paired_column<const K: u8, const PA: usize, const RA: usize>(
        dec: &avx512::prefill::Decoded,
        rows: Range<usize>,
        a: usize,
        p: [&avx512::prefill::Paired; PA],
        x: [&QuantizedActs; RA],
        out: &Columns,
    ) {
        unsafe {
            let n = rows.len();
            let mut w = 0;
            while w + 4 <= n {
                let mut o = [[0.0f32; RA]; 4];
                avx512::prefill::paired_tile::<K, 4, PA, RA>(
                    dec,
                    [w, w + 1, w + 2, w + 3],
                    p,
                    x,
                    &mut o,
                );
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
                avx512::prefill::paired_tile::<K, 1, PA, RA>(dec, [w], p, x, &mut o);
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
        match self.row_chunk(per_row) {
            None => f(0, y),
            Some(chunk) => {
                crate::threads::for_each_chunk_mut(y, chunk * per_row, |c, ys| f(c * chunk, ys))
            }
        }
    }

    /// The rows of one task of a product with `per_row` activation rows, or None where
    /// the product runs on the calling thread alone (one thread, or too little work).
    /// A task holds whole [`ROW_GROUP`]s, so no task leaves rows outside the kernels'
    /// groups to the slower kernels of fewer rows.
    fn row_chunk(&self, per_row: usize) -> Option<usize> {
        let threads = crate::threads::threads();
        if threads <= 1 || self.rows * self.row_bytes * per_row < PAR_MIN_BYTES || self.rows < 8 {
            return None;
        }
        let chunk = self.rows.div_ceil(threads * tasks_per_thread(per_row));
        Some(chunk.div_ceil(ROW_GROUP) * ROW_GROUP)
    }

    /// [`QMatrix::run_row_groups`]'s split of the rows, as ranges: `f(first_row, count)`
    /// on each, for work that writes its results itself (a prompt's [`Columns`]).
    fn run_row_ranges(&self, per_row: usize, f: impl Fn(usize, usize) + Sync) {
        let Some(chunk) = self.row_chunk(per_row) else {
            f(0, self.rows);
            return;
        };
        crate::threads::for_each_index(self.rows.div_ceil(chunk), |c| {
            f(c * chunk, chunk.min(self.rows - c * chunk))
        });
    }

    /// Fill `y[i] = f(i)` for every row, over the thread pool when the matrix is large.
    fn run_rows(&self, y: &mut [f32], f: impl Fn(usize) -> f32 + Sync) {
        let threads = crate::threads::threads();
        let row = |i: usize| {
            self.prefetch_ahead(i, 1);
            f(i)
        };
        if threads <= 1 || self.rows * self.row_bytes < PAR_MIN_BYTES || self.rows < 2 {
            for (i, v) in y.iter_mut().enumerate() {
                *v = row(i);
            }
            return;
        }
        let chunk = self.rows.div_ceil(threads * 4).max(8);
        crate::threads::for_each_chunk_mut(y, chunk, |c, ys| {
            for (j, v) in ys.iter_mut().enumerate() {
                *v = row(c * chunk + j);
            }
        });
    }

    /// Asks the memory for the bytes [`PREFETCH_AHEAD`] past rows `i .. i + n` (a hint:
    /// it cannot fault, and past the matrix's end it asks for nothing of use). A token's
    /// product reads each weight once: without it the kernels wait for each row's lines
    /// (the hardware prefetcher does not run far enough ahead of short rows), with it
    /// the reads overlap the arithmetic.
    #[inline(always)]
    fn prefetch_ahead(&self, i: usize, n: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let start = self
                .bytes
                .as_slice()
                .as_ptr()
                .wrapping_add(i * self.row_bytes + PREFETCH_AHEAD)
                .cast::<i8>();
            for off in (0..n * self.row_bytes).step_by(64) {
                // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off)) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (i, n);
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

    /// Y = X · Wᵀ for `t` rows of `x`, each row of x quantised on its own. The 32-block
    /// types compute each output number exactly as [`QMatrix::matvec`] does, and so
    /// does every type under [`Numerics::RowInvariant`]: a row's result then never
    /// depends on which other rows came with it (batch invariance — cached decoding
    /// equals the full forward bit for bit). Otherwise the K-quants follow llama.cpp's
    /// prompt orders (a repacked Q4_K matrix's rows in fours, 8 rows or more tiled). The
    /// weight rows go in L1-sized blocks that every activation row meets while they are
    /// in cache (on AVX-512, two activation rows per register:
    /// `avx512::prefill::paired_tile`); threads split the weight rows.
    ///
    /// # Shapes
    /// X (t, cols) · Wᵀ (cols, rows) → Y (t, rows)
    pub fn matmul_t_quantized(&self, x: &[f32], t: usize, numerics: Numerics) -> Result<Vec<f32>> {
        self.check_x("matmul_t_quantized", x, t)?;
        if t == 0 || self.rows == 0 {
            return Ok(vec![0.0f32; t * self.rows]);
        }
        let isa = crate::runtime::isa();
        let acts = quantize_prompt(self.dtype, x, self.cols, isa)?;
        Ok(self.matmul_t_prepared(&acts, isa, numerics))
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
        numerics: Numerics,
    ) -> Result<Vec<Vec<f32>>> {
        let isa = crate::runtime::isa();
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
                    prepared.push((kind, quantize_prompt(m.dtype, x, m.cols, isa)?));
                    prepared.len() - 1
                }
            };
            ys.push(m.matmul_t_prepared(&prepared[at].1, isa, numerics));
        }
        Ok(ys)
    }

    /// Y = X · Wᵀ by [`QMatrix::tile_rows`]: its (rows, t) results (one contiguous run of
    /// t results per weight row) written to this thread's scratch, then transposed to Y
    /// (t, rows). Neither is zeroed first: every number of both is written before it is
    /// read, and clearing them took 1–2 % of a prompt, on the calling thread alone.
    fn tiled_rows_transposed(&self, acts: &[QuantizedActs], isa: Isa) -> Vec<f32> {
        let (t, n) = (acts.len(), acts.len() * self.rows);
        let mut y = Vec::with_capacity(n);
        let mut run = |yt: &mut [f32]| {
            self.run_row_groups(yt, t, |i0, out| self.tile_rows(i0, out, acts, isa));
            transpose(yt, self.rows, t, &mut y.spare_capacity_mut()[..n], isa);
        };
        PROMPT_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut yt) if n <= SCRATCH_KEPT => {
                if yt.len() < n {
                    yt.resize(n, 0.0);
                }
                run(&mut yt[..n])
            }
            // A product larger than the scratch keeps (all the logits of a perplexity
            // window), or one begun while this thread's is running (work taken while
            // waiting): its own buffer, freed after it.
            _ => run(&mut vec![0.0; n]),
        });
        // SAFETY: `transpose` wrote all n numbers (each of the t rows of `rows`).
        unsafe { y.set_len(n) };
        y
    }

    /// Y = X · Wᵀ from activation rows already quantised for this matrix's type
    /// (t = `acts.len()` ≥ 1, each `cols` long: the callers check).
    fn matmul_t_prepared(&self, acts: &[QuantizedActs], isa: Isa, numerics: Numerics) -> Vec<f32> {
        let t = acts.len();
        let (k, k4) = self.prompt_kernels(t, isa, numerics);
        let zeroed = || vec![0.0f32; t * self.rows];
        #[cfg(target_arch = "x86_64")]
        if numerics.row_invariant() && self.gemv_grouped(isa) {
            // Every row alone in the token's order (a batched decode step, an expert's
            // rows): sixteen weight rows at a time for each activation row, the block of
            // weight rows read from cache by all of them.
            let mut y = zeroed();
            let out = Columns::new(&mut y, self.rows, t);
            self.run_row_ranges(t, |i0, n| {
                let mut v = vec![0.0f32; n];
                for (r, x) in acts.iter().enumerate() {
                    // SAFETY: gemv_grouped(isa) checked the level and the type; the rows of
                    // `acts` were prepared for this matrix (check_x).
                    unsafe { self.gemv_grouped_rows(i0, &mut v, x, isa) };
                    // SAFETY: r < t, and rows i0 .. i0 + n are this task's.
                    unsafe { out.put(r, i0, &v) };
                }
            });
            return y;
        }
        #[cfg(target_arch = "x86_64")]
        if self.tiled(isa) && avx512::pairs_available(isa) && t <= UNPACKED_MAX_ROWS {
            // A few rows (a batched decode step, a short prompt): each tile of weights
            // unpacked in registers for all of them, none decoded to memory first.
            // SAFETY: pairs_available(isa), and the rows of `acts` were prepared for
            // this matrix (check_x / check_prepared).
            let mut y = zeroed();
            unsafe {
                match self.dtype {
                    GgmlType::Q4_0 => self.few_rows::<{ avx512::Q4_0 }>(&mut y, acts),
                    GgmlType::Q4_1 => self.few_rows::<{ avx512::Q4_1 }>(&mut y, acts),
                    GgmlType::Q5_0 => self.few_rows::<{ avx512::Q5_0 }>(&mut y, acts),
                    GgmlType::Q5_1 => self.few_rows::<{ avx512::Q5_1 }>(&mut y, acts),
                    _ => self.few_rows::<{ avx512::Q8_0 }>(&mut y, acts),
                }
            }
            return y;
        }
        #[cfg(target_arch = "x86_64")]
        if self.tiled(isa) && avx512::available(isa) && t >= 2 {
            // The paired tiles write Y (t, rows) themselves.
            let mut y = zeroed();
            match self.dtype {
                GgmlType::Q4_0 => self.prefill_paired::<{ avx512::Q4_0 }>(&mut y, acts),
                GgmlType::Q4_1 => self.prefill_paired::<{ avx512::Q4_1 }>(&mut y, acts),
                GgmlType::Q5_0 => self.prefill_paired::<{ avx512::Q5_0 }>(&mut y, acts),
                GgmlType::Q5_1 => self.prefill_paired::<{ avx512::Q5_1 }>(&mut y, acts),
                _ => self.prefill_paired::<{ avx512::Q8_0 }>(&mut y, acts),
            }
            return y;
        }
        if self.tiled(isa) {
            return self.tiled_rows_transposed(acts, isa);
        }
        // Repacked Q4_K in llama.cpp's grouped order and Q6_K in its tiled order (8
        // prompt rows or more): whole groups of weight rows decoded once and met by every
        // four activation rows, sixteen rows a group on AVX-512 (`avx512::kgemm`), eight
        // on AVX2 (`avx2_kgemm`). On AVX-512 also Q4_K (not repacked), Q5_K, Q2_K, Q3_K
        // and IQ4_XS in their tiled order, and repacked Q4_0 (its repacked order: one chain
        // per output, whatever the rows).
        #[cfg(target_arch = "x86_64")]
        if let Some(k4) = k4 {
            let wide = avx512::available(isa);
            let tiled = !numerics.row_invariant() && t >= TILED_MIN_ROWS;
            let grouped = match self.dtype {
                GgmlType::Q4_K => !numerics.row_invariant() && (self.repacked() || (wide && tiled)),
                GgmlType::Q5_K | GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::IQ4_XS => {
                    wide && tiled
                }
                GgmlType::Q6_K => tiled,
                // One chain per output whatever the rows (row-invariant as it is).
                GgmlType::Q4_0 => wide && self.repacked(),
                _ => false,
            };
            let group = if wide {
                avx512::kgemm::ROWS
            } else {
                avx2_kgemm::ROWS
            };
            if grouped && isa >= Isa::Avx2 && self.rows >= group {
                let nb = self.cols / QK_K;
                let n = t * self.rows;
                let mut y = Vec::with_capacity(n);
                let (out, kk) = (&mut y.spare_capacity_mut()[..n], (k, k4));
                // SAFETY (all): the level checked above (AVX-512 VNNI where `wide`, else
                // AVX2 + FMA + F16C); every row is this matrix's cols / 256 blocks of its
                // type, and `acts` were prepared as Q8_K (check_x).
                unsafe {
                    use {avx2_kgemm as a2, avx512::kgemm as a5};
                    let five = self.dtype == GgmlType::Q5_K;
                    match (self.dtype, wide) {
                        (GgmlType::Q4_K, true) if self.repacked() => self.prompt_in_groups(
                            out,
                            acts,
                            kk,
                            |d: &mut a5::Decoded16, rows| d.fill(rows, nb, false),
                            |d, x| a5::q4_k_gemm16x4(d, x),
                        ),
                        (GgmlType::Q4_K | GgmlType::Q5_K, true) => self.prompt_in_groups(
                            out,
                            acts,
                            kk,
                            |d: &mut a5::Decoded16, rows| d.fill(rows, nb, five),
                            |d, x| a5::k45_tiled_gemm16x4(d, x),
                        ),
                        (GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::IQ4_XS, _) => self
                            .prompt_in_groups(
                                out,
                                acts,
                                kk,
                                |d: &mut a5::Decoded16Q6, rows| d.fill_k16(self.dtype, rows, nb),
                                |d, x| a5::q6_k_gemm16x4(d, x),
                            ),
                        (GgmlType::Q4_0, _) => self.prompt_in_groups(
                            out,
                            acts,
                            kk,
                            |d: &mut a5::Decoded16Q40, rows| d.fill(rows, self.cols / QK),
                            |d, x| a5::q4_0_gemm16x4(d, x),
                        ),
                        (GgmlType::Q4_K, false) => self.prompt_in_groups(
                            out,
                            acts,
                            kk,
                            |d: &mut a2::Decoded8, rows| d.fill(rows, nb),
                            |d, x| a2::q4_k_gemm8x4(d, x),
                        ),
                        (_, true) => self.prompt_in_groups(
                            out,
                            acts,
                            kk,
                            |d: &mut a5::Decoded16Q6, rows| d.fill(rows, nb),
                            |d, x| a5::q6_k_gemm16x4(d, x),
                        ),
                        (_, false) => self.prompt_in_groups(
                            out,
                            acts,
                            kk,
                            |d: &mut a2::Decoded8Q6, rows| d.fill(rows, nb),
                            |d, x| a2::q6_k_gemm8x4(d, x),
                        ),
                    }
                    // SAFETY: prompt_in_groups wrote every number of Y (each task its
                    // weight rows' columns, for every activation row).
                    y.set_len(n);
                }
                return y;
            }
        }
        // Four activation rows at a time where a kernel reads each weight block once for
        // all four (the K-quants; the same numbers as one row at a time) or where
        // llama.cpp sums rows in fours its own way (repacked Q4_K).
        let wb = (PAIRED_WEIGHT_BYTES / self.row_bytes.max(1)).max(1);
        let k4 = k4.map(|k4| {
            move |_: &(), _: usize, i: usize, x: [&QuantizedActs; 4]| k4(self.row_bytes_of(i), x)
        });
        let n = t * self.rows;
        let mut y = Vec::with_capacity(n);
        self.prompt_in_fours(
            &mut y.spare_capacity_mut()[..n],
            acts,
            wb,
            k,
            |_: &mut (), _| {},
            k4,
        );
        // SAFETY: prompt_in_fours wrote every number of Y (each task its weight rows'
        // columns, for every activation row).
        unsafe { y.set_len(n) };
        y
    }

    /// The prompt product's loop for the kernels of `R` weight rows by four activation
    /// rows (`avx512::kgemm`'s sixteen, `avx2_kgemm`'s eight): each task's weight rows
    /// `R` at a time, decoded once by `fill` into the task's scratch `D`, then met by
    /// every four activation rows (`kr`); the task's last rows outside whole groups
    /// through `k4` (the same order, read from the blocks), the activation rows outside
    /// whole fours through `k`. The numbers are those of [`QMatrix::prompt_in_fours`]
    /// with `k4` and `k`. Each task writes its rows' columns of `y` (t, rows).
    #[cfg(target_arch = "x86_64")]
    fn prompt_in_groups<D: Default, const R: usize>(
        &self,
        y: &mut [MaybeUninit<f32>],
        acts: &[QuantizedActs],
        (k, k4): (DotFn, Dot4Fn),
        fill: impl Fn(&mut D, [&[u8]; R]) + Sync,
        kr: impl Fn(&D, [&QuantizedActs; 4]) -> [[f32; R]; 4] + Sync,
    ) {
        let t = acts.len();
        let fours = t - t % 4;
        let out = Columns::over_capacity(y, self.rows, t);
        let four = |a: usize| [&acts[a], &acts[a + 1], &acts[a + 2], &acts[a + 3]];
        self.run_row_ranges(t, |i0, n| {
            let mut dec = D::default();
            let whole = n - n % R;
            for g in (i0..i0 + whole).step_by(R) {
                fill(&mut dec, std::array::from_fn(|r| self.row_bytes_of(g + r)));
                for a in (0..fours).step_by(4) {
                    for (j, yj) in kr(&dec, four(a)).iter().enumerate() {
                        // SAFETY: a + j < t, rows g .. g + 16 are this task's.
                        unsafe { out.put(a + j, g, yj) };
                    }
                }
            }
            for i in i0 + whole..i0 + n {
                let w = self.row_bytes_of(i);
                for a in (0..fours).step_by(4) {
                    for (j, vj) in k4(w, four(a)).iter().enumerate() {
                        // SAFETY: a + j < t, row i is this task's.
                        unsafe { out.put(a + j, i, std::slice::from_ref(vj)) };
                    }
                }
            }
            for i in i0..i0 + n {
                let w = self.row_bytes_of(i);
                for (r, x) in acts.iter().enumerate().skip(fours) {
                    // SAFETY: r < t, row i is this task's.
                    unsafe { out.put(r, i, &[k(w, x)]) };
                }
            }
        });
    }

    /// The prompt product's loop for kernels of four activation rows: weight rows in
    /// blocks of `wb` (L1-sized), each block first prepared by `fill` into the task's
    /// scratch `S`; then every four activation rows meet the whole block (`k4(scratch,
    /// r, i, x)` for row `i`, the block's `r`-th) before the next four come; the rows
    /// outside whole fours (all of them without `k4`) through `k`, one at a time. Each
    /// task writes its rows' columns of `y` (t, rows).
    fn prompt_in_fours<S: Default, K4>(
        &self,
        y: &mut [MaybeUninit<f32>],
        acts: &[QuantizedActs],
        wb: usize,
        k: DotFn,
        fill: impl Fn(&mut S, Range<usize>) + Sync,
        k4: Option<K4>,
    ) where
        K4: Fn(&S, usize, usize, [&QuantizedActs; 4]) -> [f32; 4] + Sync,
    {
        let t = acts.len();
        let out = Columns::over_capacity(y, self.rows, t);
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

/// One `avx512::decode::pair_tile` of [`QMatrix::decode_pairs`]: the `W` weight
/// rows `rows` with the first `RA` activation rows of `acts` (`sps` spread from them);
/// each activation row's `W` results.
///
/// # Safety
/// As `pair_tile`'s, for those rows.
#[cfg(target_arch = "x86_64")]
unsafe fn pair_group<const K: u8, const W: usize, const RA: usize>(
    rows: [&[u8]; W],
    acts: &[QuantizedActs],
    sps: &[avx512::decode::Spread],
) -> [[f32; W]; RA] {
    let mut o = [[0.0f32; W]; RA];
    // SAFETY: this function's contract.
    unsafe {
        avx512::decode::pair_tile::<K, W, RA>(
            rows,
            std::array::from_fn(|j| &acts[j]),
            std::array::from_fn(|j| &sps[j]),
            &mut o,
        )
    };
    o
}
