//! The backward rules of the tensor's own operations (`Tensor::add`, `sub`, `mul`,
//! `scale`, `reshape`, `permute`, `narrow`, `cat`, `select_rows` in `mod.rs`), one
//! function per op: each records its output on the tape ([`super::tape`]) with the rule
//! that maps ∂L/∂y to ∂L/∂xᵢ, or returns it untouched when nothing needs a gradient.
//!
//! | op | rule |
//! | --- | --- |
//! | y = a + b, a − b | ∂a = g, ∂b = ±Σ_leading g (b broadcast over leading dims) |
//! | y = a ⊙ b | ∂a = g ⊙ b, ∂b = Σ_leading g ⊙ a |
//! | y = s·x | ∂x = s·g |
//! | reshape, permute, narrow, cat, select_rows | move g back to where x's values came from (scatter-add for gathers) |

use super::tape::{needs_grad, record};
use super::Tensor;
use crate::Result;

/// Sum `g` over its leading dimensions down to `shape` (a suffix of g's shape): the
/// gradient of a broadcast operand.
pub(crate) fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let n: usize = shape.iter().product();
    let mut out = vec![0.0f32; n];
    if n > 0 {
        for chunk in g.data().chunks(n) {
            for (o, &x) in out.iter_mut().zip(chunk) {
                *o += x;
            }
        }
    }
    Tensor::new(out, shape)
}

/// Elementwise a·b where b may be a suffix-broadcast of a, as a constant.
fn mul_plain(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.zip_with(b, "mul (backward)", |x, y| x * y)
}

/// Recording for [`Tensor::add`].
pub(crate) fn record_add(out: Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let b_shape = b.shape().to_vec();
    record(out, "add", &[a, b], move |g| {
        Ok(vec![Some(g.clone()), Some(sum_to(g, &b_shape)?)])
    })
}

/// Recording for [`Tensor::sub`].
pub(crate) fn record_sub(out: Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let b_shape = b.shape().to_vec();
    record(out, "sub", &[a, b], move |g| {
        Ok(vec![
            Some(g.clone()),
            Some(sum_to(g, &b_shape)?.map(|x| -x)),
        ])
    })
}

/// Recording for [`Tensor::mul`].
pub(crate) fn record_mul(out: Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    if !needs_grad(&[a, b]) {
        return out.with_grad_node(None);
    }
    let (a_needs, b_needs) = (a.tracks_grad(), b.tracks_grad());
    let (a_saved, b_saved) = (a.detach(), b.detach());
    record(out, "mul", &[a, b], move |g| {
        let ga = if a_needs {
            Some(mul_plain(g, &b_saved)?)
        } else {
            None
        };
        let gb = if b_needs {
            Some(sum_to(&mul_plain(g, &a_saved)?, b_saved.shape())?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    })
}

/// Recording for [`Tensor::scale`].
pub(crate) fn record_scale(out: Tensor, x: &Tensor, s: f32) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    record(out, "scale", &[x], move |g| {
        Ok(vec![Some(g.map(|v| v * s))])
    })
}

/// Recording for [`Tensor::reshape`].
pub(crate) fn record_reshape(out: Tensor, x: &Tensor) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let shape = x.shape().to_vec();
    record(out, "reshape", &[x], move |g| {
        Ok(vec![Some(g.detach().reshape(&shape)?)])
    })
}

/// Recording for [`Tensor::permute`] (and `transpose`).
pub(crate) fn record_permute(out: Tensor, x: &Tensor, perm: &[usize]) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    record(out, "permute", &[x], move |g| {
        Ok(vec![Some(g.permute(&inverse)?)])
    })
}

/// Recording for [`Tensor::narrow`]: the gradient is g placed back at `start` in zeros.
pub(crate) fn record_narrow(out: Tensor, x: &Tensor, dim: usize, start: usize) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let shape = x.shape().to_vec();
    record(out, "narrow", &[x], move |g| {
        let outer: usize = shape[..dim].iter().product();
        let inner: usize = shape[dim + 1..].iter().product();
        let (d, len) = (shape[dim], g.shape()[dim]);
        let mut full = vec![0.0f32; shape.iter().product()];
        let src = g.data();
        for o in 0..outer {
            let dst = (o * d + start) * inner;
            full[dst..dst + len * inner]
                .copy_from_slice(&src[o * len * inner..(o + 1) * len * inner]);
        }
        Ok(vec![Some(Tensor::new(full, &shape)?)])
    })
}

/// Recording for [`Tensor::cat`]: each input gets its slice of g.
pub(crate) fn record_cat(out: Tensor, inputs: &[&Tensor], dim: usize) -> Tensor {
    if !needs_grad(inputs) {
        return out.with_grad_node(None);
    }
    let lens: Vec<usize> = inputs.iter().map(|t| t.shape()[dim]).collect();
    record(out, "cat", inputs, move |g| {
        let mut start = 0;
        let mut grads = Vec::with_capacity(lens.len());
        for &len in &lens {
            grads.push(Some(g.detach().narrow(dim, start, len)?));
            start += len;
        }
        Ok(grads)
    })
}

/// Recording for [`Tensor::select_rows`] (embedding lookup): scatter-add g's rows into a
/// zero table.
pub(crate) fn record_select_rows(out: Tensor, table: &Tensor, ids: &[usize]) -> Tensor {
    if !needs_grad(&[table]) {
        return out.with_grad_node(None);
    }
    let shape = table.shape().to_vec();
    let ids = ids.to_vec();
    record(out, "select_rows", &[table], move |g| {
        let d = shape[1];
        let mut full = vec![0.0f32; shape[0] * d];
        for (row, &i) in g.data().chunks(d.max(1)).zip(&ids) {
            for (o, &x) in full[i * d..(i + 1) * d].iter_mut().zip(row) {
                *o += x;
            }
        }
        Ok(vec![Some(Tensor::new(full, &shape)?)])
    })
}
