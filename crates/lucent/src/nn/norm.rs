//! Normalisation layers: `LayerNorm`, `RmsNorm`, and `Norm` choosing between them.
//!
//! LayerNorm (Ba et al. 2016): y = (x − μ) / √(σ² + ε) · γ + β, over the last axis.
//! RMSNorm (Zhang & Sennrich 2019): y = x / √(mean(x²) + ε) · γ (LLaMA, Gemma).
//!
//! Gemma stores its RMSNorm weight as w with γ = 1 + w; loaders add the 1 when they read
//! the checkpoint, so γ here is always the factor applied.

use crate::ops;
use crate::tensor::Tensor;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Which normalisation the blocks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// LayerNorm: mean and variance, scale and (optionally) shift.
    LayerNorm,
    /// RMSNorm: root mean square, scale only.
    RmsNorm,
}

/// LayerNorm with scale γ and optional shift β.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// γ: (d)
    pub weight: Tensor,
    /// β: (d), if any
    pub bias: Option<Tensor>,
    /// ε inside the square root
    pub eps: f32,
}

impl LayerNorm {
    /// From γ (d), optional β (d) and ε.
    pub fn new(weight: Tensor, bias: Option<Tensor>, eps: f32) -> Result<Self> {
        check_vector("LayerNorm weight", &weight)?;
        if let Some(b) = &bias {
            if b.shape() != weight.shape() {
                return Err(Error::mismatch(
                    "LayerNorm bias vs weight",
                    b.shape(),
                    weight.shape(),
                ));
            }
        }
        Ok(LayerNorm { weight, bias, eps })
    }

    /// γ = 1, β = 0 (when `bias`).
    pub fn identity(d: usize, bias: bool, eps: f32) -> Self {
        LayerNorm {
            weight: Tensor::full(&[d], 1.0),
            bias: bias.then(|| Tensor::zeros(&[d])),
            eps,
        }
    }

    /// Normalise over the last axis.
    ///
    /// # Shapes
    /// x: (..., d) → (..., d)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::layer_norm(x, &self.weight, self.bias.as_ref(), self.eps)
    }
}

/// RMSNorm with scale γ.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    /// γ: (d)
    pub weight: Tensor,
    /// ε inside the square root
    pub eps: f32,
}

impl RmsNorm {
    /// From γ (d) and ε.
    pub fn new(weight: Tensor, eps: f32) -> Result<Self> {
        check_vector("RmsNorm weight", &weight)?;
        Ok(RmsNorm { weight, eps })
    }

    /// γ = 1.
    pub fn identity(d: usize, eps: f32) -> Self {
        RmsNorm {
            weight: Tensor::full(&[d], 1.0),
            eps,
        }
    }

    /// Normalise over the last axis.
    ///
    /// # Shapes
    /// x: (..., d) → (..., d)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::rms_norm(x, &self.weight, self.eps)
    }
}

/// A LayerNorm or an RMSNorm, as a config's [`NormKind`] asks.
#[derive(Clone, Debug)]
pub enum Norm {
    /// LayerNorm
    Layer(LayerNorm),
    /// RMSNorm
    Rms(RmsNorm),
}

impl Norm {
    /// A fresh norm of `kind` over `d` features (γ = 1, β = 0 when `bias` and LayerNorm).
    pub fn identity(kind: NormKind, d: usize, bias: bool, eps: f32) -> Self {
        match kind {
            NormKind::LayerNorm => Norm::Layer(LayerNorm::identity(d, bias, eps)),
            NormKind::RmsNorm => Norm::Rms(RmsNorm::identity(d, eps)),
        }
    }

    /// Which kind this is.
    pub fn kind(&self) -> NormKind {
        match self {
            Norm::Layer(_) => NormKind::LayerNorm,
            Norm::Rms(_) => NormKind::RmsNorm,
        }
    }

    /// The width d it normalises.
    pub fn dim(&self) -> usize {
        match self {
            Norm::Layer(n) => n.weight.numel(),
            Norm::Rms(n) => n.weight.numel(),
        }
    }

    /// Normalise over the last axis.
    ///
    /// # Shapes
    /// x: (..., d) → (..., d)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Norm::Layer(n) => n.forward(x),
            Norm::Rms(n) => n.forward(x),
        }
    }
}

fn check_vector(what: &str, t: &Tensor) -> Result<()> {
    if t.rank() != 1 || t.numel() == 0 {
        return Err(Error::Shape(format!(
            "{what} must be a non-empty vector (d), got {:?}",
            t.shape()
        )));
    }
    Ok(())
}
