//! Matrix products on the `gemm` crate (BLIS-style packed kernels with threads).
//!
//! `matmul(A, B)`: A (..., m, k) · B (..., k, n) → (..., m, n).
//! `matmul_t(A, B)`: A (..., m, k) · Bᵀ where B is (..., n, k) → (..., m, n): the
//! layout of PyTorch `nn.Linear` weights (out, in) and of K in Q·Kᵀ.
//! Leading (batch) dimensions must agree, or B may have none (one matrix shared by
//! every batch entry). Transposes are strides handed to `gemm`, never copies.
//!
//! One shape gets its own kernel: a single row times a matrix (m = 1, the decode step
//! of a generating model, e.g. 1×576 · 576×1536). Packing a panel for one row costs
//! more than it saves, so [`gemm_into`] runs a hand-written AVX2 matrix-vector product
//! instead, split over output columns across threads when the matrix is large. Every
//! other shape goes to the `gemm` crate ([`gemm_crate_into`]).

use rayon::prelude::*;

use crate::ops::simd;
use crate::runtime::pool::in_pool;
use crate::tensor::tape::{needs_grad, record};
use crate::tensor::Tensor;
use crate::threads::gemm_parallelism;
use crate::{Error, Result};

/// Multiply-adds below which a matrix-vector product stays on one thread: a weight
/// matrix up to 2 MB is read from one core's L2 faster than threads wake (measured: a
/// 576×576 product takes 17 µs on one thread, 19-23 µs split in two).
const GEMV_PARALLEL_MIN: usize = 1 << 19;

/// Few rows (m ≤ this) times a large matrix: the product is bound by reading B, so it is
/// split over output columns across threads, one serial `gemm` call each, whether or not
/// its multiply-adds pass the `gemm` crate's threading threshold (one sentence through
/// MiniLM: 12×384 · 384×1536; handing the larger few-row products to the crate's own
/// threads instead made a one-sentence MiniLM pass on 2 threads 10–12 ms instead of 5–8).
const FEW_ROWS: usize = 64;
/// Elements of B (k·n) from which a few-row product is split over columns: 2¹⁷ floats =
/// 512 KB, about what one core's L2 holds.
const FEW_ROWS_SPLIT_MIN: usize = 1 << 17;

/// A · B over the last two dimensions, batched over the leading ones.
///
/// # Shapes
/// a: (..., m, k), b: (..., k, n) or (k, n) → (..., m, n)
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let out = batched(a, b, false, "matmul")?;
    Ok(record_matmul(out, a, b, false))
}

/// A · Bᵀ over the last two dimensions, batched over the leading ones.
///
/// # Shapes
/// a: (..., m, k), b: (..., n, k) or (n, k) → (..., m, n)
pub fn matmul_t(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let out = batched(a, b, true, "matmul_t")?;
    Ok(record_matmul(out, a, b, true))
}

/// A linear layer as PyTorch defines it: y = x · Wᵀ + b.
///
/// # Shapes
/// x: (..., in), w: (out, in), bias: (out) → (..., out)
pub fn linear(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_packed(x, w, None, bias)
}

/// [`linear`], with W also packed once for the kernel (`packed`, W's numbers: see
/// [`crate::ops::linear_kernel::PackedNt`]): a product of several rows outside
/// training reads the packed panels; the same numbers either way.
///
/// # Shapes
/// x: (..., in), w: (out, in), bias: (out) → (..., out)
pub fn linear_packed(
    x: &Tensor,
    w: &Tensor,
    packed: Option<&crate::ops::linear_kernel::PackedNt>,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let [out, inp] = w.dims()?;
    if x.last_dim() != inp || x.rank() == 0 {
        return Err(Error::mismatch(
            "linear (x vs weight (out, in))",
            x.shape(),
            w.shape(),
        ));
    }
    let rows = x.numel() / inp.max(1);
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = out; // (..., out); rank ≥ 1 was checked above
    }
    // Training: build y from recorded ops (matmul_t, add) so gradients flow; the fused
    // forms below write into buffers the tape cannot see.
    let training = crate::tensor::tape::is_grad_enabled()
        && (x.tracks_grad() || w.tracks_grad() || bias.is_some_and(|b| b.tracks_grad()));
    if let Some(b) = bias {
        if b.shape() != [out] {
            return Err(Error::mismatch("linear bias", b.shape(), &[out]));
        }
        if training {
            let y = matmul_t(&x.reshape(&[rows, inp])?, w)?.reshape(&shape)?; // (..., out)
            return y.add(b);
        }
    }
    if cfg!(target_arch = "x86_64") && rows > 1 && !training {
        // lucent's own kernel: W read in place, the bias added in the same pass, every
        // number summed in one order whatever the rows (ops::linear_kernel).
        let mut y = vec![0.0f32; rows * out];
        let bias = bias.map(Tensor::data);
        match packed.filter(|p| p.n() == out && p.k() == inp) {
            Some(p) => crate::ops::linear_kernel::matmul_nt_packed(&mut y, x.data(), p, bias, rows),
            None => crate::ops::linear_kernel::matmul_nt(
                &mut y,
                x.data(),
                w.data(),
                bias,
                rows,
                inp,
                out,
            ),
        }
        return Tensor::new(y, &shape); // (..., out)
    }
    // (rows, out) → (..., out); the 2-d product is dropped here, so y owns its storage
    // alone and the bias is added without a copy.
    let y = matmul_t(&x.reshape(&[rows, inp])?, w)?.reshape(&shape)?;
    match bias {
        Some(b) => {
            let mut y = y;
            for row in y.data_mut().chunks_exact_mut(out.max(1)) {
                for (v, &bias) in row.iter_mut().zip(b.data()) {
                    *v += bias; // in place: y is freshly computed
                }
            }
            Ok(y)
        }
        None => Ok(y),
    }
}

fn batched(a: &Tensor, b: &Tensor, transpose_b: bool, op: &str) -> Result<Tensor> {
    if a.rank() < 2 || b.rank() < 2 {
        return Err(Error::Shape(format!(
            "{op} needs matrices (rank ≥ 2), got {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let (kb, n) = if transpose_b {
        (b.shape()[rb - 1], b.shape()[rb - 2])
    } else {
        (b.shape()[rb - 2], b.shape()[rb - 1])
    };
    let batch_a = &a.shape()[..ra - 2];
    let batch_b = &b.shape()[..rb - 2];
    if k != kb || !(batch_b.is_empty() || batch_a == batch_b) {
        return Err(Error::mismatch(op, a.shape(), b.shape()));
    }
    let batches: usize = batch_a.iter().product();
    let mut out = vec![0.0f32; batches * m * n];
    let (ad, bd) = (a.data(), b.data());
    let b_step = if batch_b.is_empty() { 0 } else { k * n };
    for i in 0..batches {
        gemm_into(
            &mut out[i * m * n..(i + 1) * m * n],
            &ad[i * m * k..(i + 1) * m * k],
            &bd[i * b_step..i * b_step + k * n],
            m,
            k,
            n,
            transpose_b,
        );
    }
    let mut shape = batch_a.to_vec();
    shape.extend([m, n]);
    Tensor::new(out, &shape)
}

/// C (m×n) = A (m×k) · B, where B is (k×n), or (n×k) read transposed when
/// `transpose_b`. All row-major. C is overwritten. One row (m = 1) runs the
/// matrix-vector kernel, everything else the `gemm` crate.
pub(crate) fn gemm_into(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
    transpose_b: bool,
) {
    if m == 1 && k > 0 && n > 0 && simd::has_avx2_fma() {
        assert!(
            c.len() == n && a.len() == k && b.len() == k * n,
            "gemm_into sizes"
        ); // ok: internal invariant
        gemv(c, a, b, k, n, transpose_b);
        return;
    }
    gemm_crate_into(c, a, b, m, k, n, transpose_b)
}

/// y (n) = x (k) · B with B (k×n), or (n×k) read transposed: the decode-step product.
fn gemv(y: &mut [f32], x: &[f32], b: &[f32], k: usize, n: usize, transpose_b: bool) {
    by_column_blocks(y, k, |j0, yb| {
        if transpose_b {
            simd::matvec_t(yb, x, &b[j0 * k..]);
        } else {
            simd::vecmat(yb, x, &b[j0..], n);
        }
    });
}

/// Run `run(j0, y[j0..])` over blocks of y's n output columns, split across threads when
/// the product (n × k multiply-adds) is large enough: each part owns a block of columns,
/// a multiple of 64 (whole cache lines of a row-major B, whole 4-row groups of a
/// transposed one). The split does not change any number.
fn by_column_blocks(y: &mut [f32], k: usize, run: impl Fn(usize, &mut [f32]) + Sync) {
    let n = y.len();
    let parts = simd::parts_for(n * k, n.div_ceil(64), GEMV_PARALLEL_MIN);
    let block = n.div_ceil(parts).next_multiple_of(64);
    if parts <= 1 {
        run(0, y);
    } else {
        // On the pass's team when one runs (a decoded token's many small products),
        // else on the pool.
        crate::threads::for_each_chunk_mut(y, block, |i, yb| run(i * block, yb));
    }
}

/// y (n) = x (k) · Wᵀ with W (n×k) stored as f16: the decode-step product of
/// [`gemm_into`] for one row (split over columns in the same blocks), reading half the
/// bytes — the same numbers as on the widened W (`simd::matvec_t_f16`). For the AVX2
/// level and above, where `gemm_into` takes the matrix-vector path.
///
/// # Shapes
/// y: (n), x: (k), w: (n, k)
pub fn gemv_t_f16(y: &mut [f32], x: &[f32], w: &[half::f16], k: usize, n: usize) {
    assert!(
        y.len() == n && x.len() == k && w.len() == n * k,
        "gemv_t_f16 sizes"
    ); // ok: internal invariant
    by_column_blocks(y, k, |j0, yb| simd::matvec_t_f16(yb, x, &w[j0 * k..]));
}

/// The numbers [`gemv_t_f16`] gives y[j] for each j in `rows` (ascending), bit for bit,
/// computing only those rows: the kernel sums a row inside its aligned group of four
/// (a split's blocks start at multiples of 64) unless the row is among the last n mod 4,
/// so each named row's group is computed as the whole call computes it. The other
/// entries of y are left as they are.
///
/// # Shapes
/// y: (n), x: (k), w: (n, k)
pub fn gemv_t_f16_rows(
    y: &mut [f32],
    x: &[f32],
    w: &[half::f16],
    k: usize,
    n: usize,
    rows: &[usize],
) {
    assert!(
        y.len() == n && x.len() == k && w.len() == n * k,
        "gemv_t_f16_rows sizes"
    ); // ok: internal invariant
    for_row_groups(y, rows, |g, four| {
        simd::matvec_t_f16(four, x, &w[g * k..(g + four.len()) * k]);
    });
}

/// The numbers the one-row [`gemm_into`] gives y[j] = x · W[j]ᵀ (B = W (n×k) read
/// transposed) for each j in `rows` (ascending), bit for bit at the AVX2 level and
/// above (the matrix-vector kernel; [`gemv_t_f16_rows`] says how), computing only those
/// rows; below AVX2 each row's plain dot. The other entries of y are left as they are.
///
/// # Shapes
/// y: (n), x: (k), w: (n, k)
pub fn gemv_t_rows(y: &mut [f32], x: &[f32], w: &[f32], k: usize, n: usize, rows: &[usize]) {
    assert!(
        y.len() == n && x.len() == k && w.len() == n * k,
        "gemv_t_rows sizes"
    ); // ok: internal invariant
    for_row_groups(y, rows, |g, four| {
        simd::matvec_t(four, x, &w[g * k..(g + four.len()) * k]);
    });
}

/// For each aligned group of four rows (g a multiple of 4, min(4, n − g) rows, n =
/// y.len()) that holds one of `rows` (ascending, each below n): `run(g, four)` computes
/// the group into `four`, and the named rows of it are copied into y.
fn for_row_groups(y: &mut [f32], rows: &[usize], mut run: impl FnMut(usize, &mut [f32])) {
    let n = y.len();
    let mut four = [0.0f32; 4];
    let mut i = 0;
    while i < rows.len() {
        let g = rows[i] & !3;
        let len = 4.min(n.saturating_sub(g));
        if len > 0 {
            run(g, &mut four[..len]);
        }
        while i < rows.len() && rows[i] & !3 == g {
            if let Some(v) = four.get(rows[i] - g).filter(|_| rows[i] < n) {
                y[rows[i]] = *v;
            }
            i += 1;
        }
    }
}

/// C (m×n) = A (m×k) · B on the `gemm` crate for every shape (no matrix-vector path):
/// what [`gemm_into`] uses for m > 1, public so benchmarks can compare the two.
pub(crate) fn gemm_crate_into(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
    transpose_b: bool,
) {
    gemm_auto(c, a, b, m, k, n, transpose_b, false)
}

/// C = A·op(B), or C += A·op(B) when `accumulate`, on as many threads as pay: a few rows
/// times a large B go over column blocks, one per thread, each a serial `gemm` call
/// (see [`FEW_ROWS`]); everything else goes to `gemm` with [`gemm_parallelism`].
#[allow(clippy::too_many_arguments)]
fn gemm_auto(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
    transpose_b: bool,
    accumulate: bool,
) {
    let parallelism = gemm_parallelism(m * n * k);
    let threads = crate::threads::threads();
    let few_rows = threads > 1 && m <= FEW_ROWS && k * n >= FEW_ROWS_SPLIT_MIN && n >= 2 * 64;
    if !few_rows {
        gemm_strided(
            c,
            a,
            false,
            b,
            transpose_b,
            m,
            k,
            n,
            accumulate,
            parallelism,
        );
        return;
    }
    assert!(
        c.len() == m * n && a.len() == m * k && b.len() == k * n,
        "gemm sizes"
    ); // ok: internal invariant
       // Column blocks of whole cache lines; each thread writes only its own columns of C.
    let block = n.div_ceil(threads).next_multiple_of(16);
    let c_ptr = SendPtr(c.as_mut_ptr());
    in_pool(|| {
        (0..n.div_ceil(block)).into_par_iter().for_each(|p| {
            let (j0, j1) = (p * block, ((p + 1) * block).min(n));
            let c_ptr = &c_ptr;
            // B's columns j0..j1: rows j0..j1 of a transposed (n×k) B, or an offset into a
            // row-major (k×n) one.
            let (b_off, b_cs, b_rs) = if transpose_b {
                (j0 * k, k as isize, 1)
            } else {
                (j0, 1, n as isize)
            };
            // SAFETY: block p reads A (m×k) and B's columns j0..j1, all inside their slices
            // (sizes asserted above), and writes C's columns j0..j1 of every row, which no
            // other block touches; the slices outlive the parallel loop.
            unsafe {
                gemm::gemm(
                    m,
                    j1 - j0,
                    k,
                    c_ptr.0.add(j0),
                    1,
                    n as isize,
                    accumulate,
                    a.as_ptr(),
                    1,
                    k as isize,
                    b.as_ptr().add(b_off),
                    b_cs,
                    b_rs,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        })
    });
}

/// A raw output pointer shared by column blocks that write disjoint columns.
struct SendPtr(*mut f32);
// SAFETY: only used by gemm_auto, whose blocks write disjoint elements.
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

/// C (m×n) = op(A) · op(B), or C += op(A) · op(B) when `accumulate`; all row-major.
/// A is stored (m×k), or (k×m) read transposed when `trans_a`; B is stored (k×n), or
/// (n×k) read transposed when `trans_b`. Transposes are strides, never copies. This is
/// the one place lucent calls the `gemm` crate.
///
/// Panics if a slice's length does not match its dimensions (an internal invariant:
/// callers derive the dimensions from checked tensor shapes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_strided(
    c: &mut [f32],
    a: &[f32],
    trans_a: bool,
    b: &[f32],
    trans_b: bool,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
    parallelism: gemm::Parallelism,
) {
    assert!(
        c.len() == m * n && a.len() == m * k && b.len() == k * n,
        "gemm sizes"
    ); // ok: internal invariant
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    // Row-major strides: element (i, j) of a matrix with `cols` columns is at i*cols + j,
    // so the row stride is `cols` and the column stride is 1; a transpose swaps them.
    // (column stride, row stride) of each operand as the gemm crate reads them:
    let (a_cs, a_rs) = if trans_a {
        (m as isize, 1)
    } else {
        (1, k as isize)
    };
    let (b_cs, b_rs) = if trans_b {
        (k as isize, 1)
    } else {
        (1, n as isize)
    };
    let mut run = move || {
        // SAFETY: the slices hold exactly m·n, m·k and k·n elements (asserted above) and
        // the strides address only elements inside them; dst = 1·dst (if read) +
        // 1·op(A)·op(B).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                accumulate,
                a.as_ptr(),
                a_cs,
                a_rs,
                b.as_ptr(),
                b_cs,
                b_rs,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            )
        }
    };
    // The crate's threads are rayon's of the pool it is called in: a lucent pool's.
    match parallelism {
        gemm::Parallelism::None => run(),
        _ => in_pool(run),
    }
}

/// The plain twin of [`gemm_into`]: three loops, as the formula C_ij = Σ_k A_ik B_kj.
pub(crate) mod reference {
    /// C = A · B (or A · Bᵀ), row-major, f64 accumulation.
    #[cfg(test)]
    pub fn gemm(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, transpose_b: bool) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    let bv = if transpose_b {
                        b[j * k + p]
                    } else {
                        b[p * n + j]
                    };
                    s += a[i * k + p] as f64 * bv as f64;
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }
}

// ------------------------------------------------------------------ backward

// The recording of matmul / matmul_t on the tape, and the GEMM its rules use.
/// C = α·op(A)·op(B) (+ C if `accumulate`), with A (m, k) stored row-major as (m, k) or,
/// when `trans_a`, as (k, m); B (k, n) stored as (k, n) or, when `trans_b`, as (n, k).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_general(
    c: &mut [f32],
    a: &[f32],
    trans_a: bool,
    b: &[f32],
    trans_b: bool,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
) {
    crate::ops::matmul::gemm_strided(
        c,
        a,
        trans_a,
        b,
        trans_b,
        m,
        k,
        n,
        accumulate,
        crate::threads::gemm_parallelism(m * n * k),
    )
}

/// Recording for [`crate::ops::matmul`] (C = A·B) and [`crate::ops::matmul_t`]
/// (C = A·Bᵀ); B may be shared by every batch.
pub(crate) fn record_matmul(out: Tensor, a: &Tensor, b: &Tensor, transpose_b: bool) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let (a_needs, b_needs) = (a.tracks_grad(), b.tracks_grad());
    let (a_saved, b_saved) = (a.detach(), b.detach());
    let op = if transpose_b { "matmul_t" } else { "matmul" };
    record(out, op, &[a, b], move |g| {
        let (ra, rb) = (a_saved.rank(), b_saved.rank());
        let (m, k) = (a_saved.shape()[ra - 2], a_saved.shape()[ra - 1]);
        let n = g.shape()[g.rank() - 1];
        let shared = rb == 2;
        let batches = a_saved.numel() / (m * k).max(1);
        let (ad, bd, gd) = (a_saved.data(), b_saved.data(), g.data());
        let ga = if a_needs {
            // ∂A = G·Bᵀ (C = A·B) or G·B (C = A·Bᵀ): (m, n)·(n, k).
            let mut ga = vec![0.0f32; a_saved.numel()];
            for i in 0..batches {
                let bi = if shared { 0 } else { i };
                gemm_general(
                    &mut ga[i * m * k..(i + 1) * m * k],
                    &gd[i * m * n..(i + 1) * m * n],
                    false,
                    &bd[bi * k * n..(bi + 1) * k * n],
                    !transpose_b,
                    m,
                    n,
                    k,
                    false,
                );
            }
            Some(Tensor::new(ga, a_saved.shape())?)
        } else {
            None
        };
        let gb = if b_needs {
            let mut gbv = vec![0.0f32; b_saved.numel()];
            if shared {
                // Every batch shares B: stack the batches as rows, one product.
                let rows = batches * m;
                if transpose_b {
                    // ∂B (n, k) = Gᵀ·A
                    gemm_general(&mut gbv, gd, true, ad, false, n, rows, k, false);
                } else {
                    // ∂B (k, n) = Aᵀ·G
                    gemm_general(&mut gbv, ad, true, gd, false, k, rows, n, false);
                }
            } else {
                for i in 0..batches {
                    let (a_i, g_i) = (
                        &ad[i * m * k..(i + 1) * m * k],
                        &gd[i * m * n..(i + 1) * m * n],
                    );
                    let dst = &mut gbv[i * k * n..(i + 1) * k * n];
                    if transpose_b {
                        gemm_general(dst, g_i, true, a_i, false, n, m, k, false);
                    } else {
                        gemm_general(dst, a_i, true, g_i, false, k, m, n, false);
                    }
                }
            }
            Some(Tensor::new(gbv, b_saved.shape())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn gemm_equals_reference_on_awkward_shapes() -> TestResult {
        let mut rng = StdRng::seed_from_u64(7);
        for &(m, k, n) in &[
            (1, 1, 1),
            (1, 576, 37),
            (3, 5, 7),
            (17, 33, 9),
            (65, 31, 129),
        ] {
            for tb in [false, true] {
                let a = Tensor::randn(&[m, k], 1.0, &mut rng);
                let b_shape = if tb { [n, k] } else { [k, n] };
                let b = Tensor::randn(&b_shape, 1.0, &mut rng);
                let want = reference::gemm(a.data(), b.data(), m, k, n, tb);
                // Σ_p |a_ip · b_pj|: the scale of rounding error in an f32 dot product.
                let (aa, ba) = (a.map(f32::abs), b.map(f32::abs));
                let mag = reference::gemm(aa.data(), ba.data(), m, k, n, tb);
                let got = if tb { matmul_t(&a, &b) } else { matmul(&a, &b) }?;
                // Tolerance: 1e-6 · Σ|a·b| (f32 has ε ≈ 6e-8; blocked sums stay well inside).
                let err = got
                    .data()
                    .iter()
                    .zip(&want)
                    .zip(&mag)
                    .map(|((x, y), s)| (x - y).abs() / (1e-6 * (1.0 + s)))
                    .fold(0.0, f32::max);
                assert!(err <= 1.0, "({m},{k},{n}) tb={tb}: {err} × tolerance");
            }
        }
        Ok(())
    }

    #[test]
    fn gemv_equals_reference_and_gemm_crate() {
        let mut rng = StdRng::seed_from_u64(8);
        for &(k, n) in &[
            (1, 1),
            (3, 7),
            (9, 17),
            (33, 65),
            (576, 129),
            (577, 200),
            (64, 1000),
            (576, 1536),
        ] {
            for tb in [false, true] {
                let a = Tensor::randn(&[1, k], 1.0, &mut rng);
                let b_shape = if tb { [n, k] } else { [k, n] };
                let b = Tensor::randn(&b_shape, 1.0, &mut rng);
                let want = reference::gemm(a.data(), b.data(), 1, k, n, tb);
                let (aa, ba) = (a.map(f32::abs), b.map(f32::abs));
                let mag = reference::gemm(aa.data(), ba.data(), 1, k, n, tb);
                let mut got = vec![0.0; n];
                gemm_into(&mut got, a.data(), b.data(), 1, k, n, tb);
                let mut packed = vec![0.0; n];
                gemm_crate_into(&mut packed, a.data(), b.data(), 1, k, n, tb);
                // Tolerance: 1e-6 · Σ|a·b| per output, against both the f64 twin and gemm.
                for j in 0..n {
                    let tol = 1e-6 * (1.0 + mag[j]);
                    assert!((got[j] - want[j]).abs() <= tol, "k={k} n={n} tb={tb} j={j}");
                    assert!(
                        (got[j] - packed[j]).abs() <= 2.0 * tol,
                        "k={k} n={n} tb={tb} j={j} vs gemm"
                    );
                }
            }
        }
    }

    #[test]
    fn batched_and_shared_rhs() -> TestResult {
        let mut rng = StdRng::seed_from_u64(1);
        let a = Tensor::randn(&[2, 3, 4, 5], 1.0, &mut rng);
        let w = Tensor::randn(&[6, 5], 1.0, &mut rng);
        let y = matmul_t(&a, &w)?;
        assert_eq!(y.shape(), &[2, 3, 4, 6]);
        // linear runs lucent's own kernel (ops::linear_kernel): its twin's bits, and the
        // gemm crate's product within rounding.
        let y2 = linear(&a, &w, None)?;
        let mut twin = vec![0.0; 24 * 6];
        crate::ops::linear_kernel::reference::matmul_nt(
            &mut twin,
            a.data(),
            w.data(),
            None,
            24,
            5,
            6,
        );
        assert_eq!(y2.data(), &twin[..]);
        for (p, q) in y.data().iter().zip(y2.data()) {
            assert!((p - q).abs() <= 1e-5 * (1.0 + p.abs()), "{p} vs {q}");
        }
        // With a bias (added in the kernel's pass for rows > 1), against the formula, 1e-5.
        for &(rows, inp, out) in &[(1, 5, 6), (3, 7, 9), (37, 33, 17), (64, 384, 96)] {
            let x = Tensor::randn(&[rows, inp], 1.0, &mut rng);
            let w = Tensor::randn(&[out, inp], 1.0, &mut rng);
            let b = Tensor::randn(&[out], 1.0, &mut rng);
            let y = linear(&x, &w, Some(&b))?;
            for i in 0..rows {
                for j in 0..out {
                    // The formula in f64; the tolerance scales with Σ|x·w| (an f32 sum
                    // of 384 products carries that much rounding whatever its order).
                    let terms = (0..inp).map(|p| {
                        f64::from(x.data()[i * inp + p]) * f64::from(w.data()[j * inp + p])
                    });
                    let want = f64::from(b.data()[j]) + terms.clone().sum::<f64>();
                    let mag = f64::from(b.data()[j]).abs() + terms.map(f64::abs).sum::<f64>();
                    let got = f64::from(y.data()[i * out + j]);
                    assert!(
                        (got - want).abs() <= 1e-6 * (1.0 + mag),
                        "({rows},{inp},{out}) [{i},{j}]: {got} vs {want}"
                    );
                }
            }
        }
        let err = matmul(&a, &w).unwrap_err().to_string();
        assert!(
            err.contains("[2, 3, 4, 5]") && err.contains("[6, 5]"),
            "{err}"
        );
        Ok(())
    }
}
