//! `Linear`: the affine map every projection in a Transformer is made of.
//!
//! y = x · Wᵀ + b, with W stored (out, in) as PyTorch's `nn.Linear` stores it, so
//! checkpoint weights are used as they are.

use rand::Rng;

use crate::ops;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A linear layer y = x · Wᵀ + b.
#[derive(Clone, Debug)]
pub struct Linear {
    /// W: (out, in)
    pub weight: Tensor,
    /// b: (out), if any
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer from its weight (out, in) and optional bias (out); errors name both shapes.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let [out, _inp] = weight.dims().map_err(|_| {
            Error::Shape(format!(
                "a Linear weight must be (out, in), got {:?}",
                weight.shape()
            ))
        })?;
        if let Some(b) = &bias {
            if b.shape() != [out] {
                return Err(Error::mismatch(
                    "Linear bias vs weight (out, in)",
                    b.shape(),
                    weight.shape(),
                ));
            }
        }
        Ok(Linear { weight, bias })
    }

    /// Weights drawn from N(0, std²), bias (if any) zero.
    pub fn new_random(
        in_features: usize,
        out_features: usize,
        bias: bool,
        std: f32,
        rng: &mut impl Rng,
    ) -> Self {
        Linear {
            weight: Tensor::randn(&[out_features, in_features], std, rng),
            bias: bias.then(|| Tensor::zeros(&[out_features])),
        }
    }

    /// The input width.
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// The output width.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// Apply the layer.
    ///
    /// # Shapes
    /// x: (..., in) → (..., out)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::linear(x, &self.weight, self.bias.as_ref())
    }

    /// The number of parameters (weights and bias).
    pub fn num_params(&self) -> usize {
        self.weight.numel() + self.bias.as_ref().map_or(0, Tensor::numel)
    }
}
