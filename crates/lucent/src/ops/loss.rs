//! Log-softmax and the cross-entropy loss of a language model.
//!
//! log_softmax(x)_i = x_i − max x − log Σ_j exp(x_j − max x)
//!
//! cross_entropy(logits, targets) = −(1/N) Σ_n log_softmax(logits_n)[target_n], the mean
//! negative log-likelihood over the N rows whose target is not ignored (PyTorch's
//! `F.cross_entropy` with `reduction="mean"` and `ignore_index`). Its gradient with
//! respect to the logits is (softmax(logits_n) − onehot(target_n)) / N.

use crate::tensor::Tensor;
use crate::{Error, Result};

/// log-softmax over the last axis.
///
/// # Shapes
/// x: (..., n) → (..., n)
pub fn log_softmax(x: &Tensor) -> Result<Tensor> {
    let n = x.last_dim().max(1);
    let mut out = x.data().to_vec();
    for row in out.chunks_mut(n) {
        reference::log_softmax_row(row);
    }
    Ok(log_softmax_record(Tensor::new(out, x.shape())?, x))
}

fn log_softmax_record(out: Tensor, x: &Tensor) -> Tensor {
    if !crate::tensor::tape::needs_grad(&[x]) {
        return out.detach();
    }
    let y = out.detach();
    crate::tensor::tape::record(out, "log_softmax", &[x], move |g| {
        // ∂x = g − softmax(x) Σ g
        let n = y.last_dim().max(1);
        let mut gx = vec![0.0f32; y.numel()];
        for ((dst, yr), gr) in gx
            .chunks_mut(n)
            .zip(y.data().chunks(n))
            .zip(g.data().chunks(n))
        {
            let sum: f32 = gr.iter().sum();
            for ((d, &yv), &gv) in dst.iter_mut().zip(yr).zip(gr) {
                *d = gv - yv.exp() * sum;
            }
        }
        Ok(vec![Some(Tensor::new(gx, y.shape())?)])
    })
}

/// Mean cross-entropy of `logits` against `targets` (one class index per row), skipping
/// rows whose target equals `ignore_index`. Errors on a target outside the vocabulary
/// or when every row is ignored.
///
/// # Shapes
/// logits: (..., V) with N rows, targets: N → loss (1)
pub fn cross_entropy(
    logits: &Tensor,
    targets: &[usize],
    ignore_index: Option<usize>,
) -> Result<Tensor> {
    let v = logits.last_dim();
    if logits.rank() == 0 || v == 0 {
        return Err(Error::Shape(format!(
            "cross_entropy needs logits (..., V) with V > 0, got {:?}",
            logits.shape()
        )));
    }
    let rows = logits.numel() / v;
    if targets.len() != rows {
        return Err(Error::Shape(format!(
            "cross_entropy: {} targets for {rows} rows of logits {:?}",
            targets.len(),
            logits.shape()
        )));
    }
    if let Some((i, &t)) = targets
        .iter()
        .enumerate()
        .find(|(_, &t)| t >= v && Some(t) != ignore_index)
    {
        return Err(Error::Argument(format!(
            "cross_entropy: target {t} at row {i} is outside the vocabulary of {v} classes"
        )));
    }
    let (loss, counted) = reference::cross_entropy(logits.data(), v, targets, ignore_index);
    if counted == 0 {
        return Err(Error::Argument(
            "cross_entropy: every target is ignored, so the mean is undefined".into(),
        ));
    }
    let out = Tensor::new(vec![loss], &[1])?;
    if !crate::tensor::tape::needs_grad(&[logits]) {
        return Ok(out);
    }
    let (xs, targets) = (logits.detach(), targets.to_vec());
    Ok(crate::tensor::tape::record(
        out,
        "cross_entropy",
        &[logits],
        move |g| {
            let scale = g.data()[0] / counted as f32;
            let mut gx = xs.data().to_vec();
            for (row, &t) in gx.chunks_mut(v).zip(&targets) {
                if Some(t) == ignore_index {
                    row.fill(0.0);
                    continue;
                }
                crate::ops::softmax::softmax_row(row, 1.0);
                row[t] -= 1.0;
                for x in row.iter_mut() {
                    *x *= scale;
                }
            }
            Ok(vec![Some(Tensor::new(gx, xs.shape())?)])
        },
    ))
}

/// The plain formulas.
pub(crate) mod reference {
    /// log-softmax of one row in place (f64 sums).
    pub fn log_softmax_row(row: &mut [f32]) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = row
            .iter()
            .map(|&x| ((x - max) as f64).exp())
            .sum::<f64>()
            .ln();
        for x in row.iter_mut() {
            *x = ((*x - max) as f64 - lse) as f32;
        }
    }

    /// (mean loss, number of rows counted) over rows of `v` logits.
    pub fn cross_entropy(
        logits: &[f32],
        v: usize,
        targets: &[usize],
        ignore: Option<usize>,
    ) -> (f32, usize) {
        let mut total = 0.0f64;
        let mut counted = 0;
        for (row, &t) in logits.chunks(v).zip(targets) {
            if Some(t) == ignore {
                continue;
            }
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = row
                .iter()
                .map(|&x| (x as f64 - max).exp())
                .sum::<f64>()
                .ln()
                + max;
            total += lse - row[t] as f64;
            counted += 1;
        }
        ((total / counted.max(1) as f64) as f32, counted)
    }
}
