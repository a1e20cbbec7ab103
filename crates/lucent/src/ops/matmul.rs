//! Matrix products on the `gemm` crate (BLIS-style packed kernels with threads).
//!
//! `matmul(A, B)`: A (..., m, k) · B (..., k, n) → (..., m, n).
//! `matmul_t(A, B)`: A (..., m, k) · Bᵀ where B is (..., n, k) → (..., m, n): the
//! layout of PyTorch `nn.Linear` weights (out, in) and of K in Q·Kᵀ.
//! Leading (batch) dimensions must agree, or B may have none (one matrix shared by
//! every batch entry). Transposes are strides handed to `gemm`, never copies.

use crate::tensor::Tensor;
use crate::threads::gemm_parallelism;
use crate::{Error, Result};

/// A · B over the last two dimensions, batched over the leading ones.
///
/// # Shapes
/// a: (..., m, k), b: (..., k, n) or (k, n) → (..., m, n)
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let out = batched(a, b, false, "matmul")?;
    Ok(crate::autograd::rules::matmul(out, a, b, false))
}

/// A · Bᵀ over the last two dimensions, batched over the leading ones.
///
/// # Shapes
/// a: (..., m, k), b: (..., n, k) or (n, k) → (..., m, n)
pub fn matmul_t(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let out = batched(a, b, true, "matmul_t")?;
    Ok(crate::autograd::rules::matmul(out, a, b, true))
}

/// A linear layer as PyTorch defines it: y = x · Wᵀ + b.
///
/// # Shapes
/// x: (..., in), w: (out, in), bias: (out) → (..., out)
pub fn linear(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let [out, inp] = w.dims()?;
    if x.last_dim() != inp || x.rank() == 0 {
        return Err(Error::mismatch(
            "linear (x vs weight (out, in))",
            x.shape(),
            w.shape(),
        ));
    }
    let rows = x.numel() / inp.max(1);
    let y = matmul_t(&x.reshape(&[rows, inp])?, w)?; // (rows, out)
    let mut shape = x.shape().to_vec();
    *shape.last_mut().expect("rank ≥ 1 checked above") = out; // ok: rank checked
    let y = y.reshape(&shape)?;
    match bias {
        Some(b) => {
            if b.shape() != [out] {
                return Err(Error::mismatch("linear bias", b.shape(), &[out]));
            }
            y.add(b)
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
/// `transpose_b`. All row-major. C is overwritten.
pub fn gemm_into(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
    transpose_b: bool,
) {
    assert!(
        c.len() == m * n && a.len() == m * k && b.len() == k * n,
        "gemm_into sizes"
    ); // ok: internal invariant
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    // Row-major strides: element (i, j) of a matrix with `cols` columns is at i*cols + j,
    // so the row stride is `cols` and the column stride is 1. Bᵀ swaps them.
    let (b_cs, b_rs) = if transpose_b {
        (k as isize, 1)
    } else {
        (1, n as isize)
    };
    // SAFETY: the slices are exactly m×n, m×k and k×n elements (asserted above) and
    // the strides address only elements inside them.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            b_cs,
            b_rs,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm_parallelism(m * n * k),
        );
    }
}

/// The plain twin of [`gemm_into`]: three loops, as the formula C_ij = Σ_k A_ik B_kj.
pub mod reference {
    /// C = A · B (or A · Bᵀ), row-major, f64 accumulation.
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn gemm_equals_reference_on_awkward_shapes() {
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
                let got = if tb { matmul_t(&a, &b) } else { matmul(&a, &b) }.unwrap();
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
    }

    #[test]
    fn batched_and_shared_rhs() {
        let mut rng = StdRng::seed_from_u64(1);
        let a = Tensor::randn(&[2, 3, 4, 5], 1.0, &mut rng);
        let w = Tensor::randn(&[6, 5], 1.0, &mut rng);
        let y = matmul_t(&a, &w).unwrap();
        assert_eq!(y.shape(), &[2, 3, 4, 6]);
        let y2 = linear(&a, &w, None).unwrap();
        assert_eq!(y.data(), y2.data());
        let err = matmul(&a, &w).unwrap_err().to_string();
        assert!(
            err.contains("[2, 3, 4, 5]") && err.contains("[6, 5]"),
            "{err}"
        );
    }
}
