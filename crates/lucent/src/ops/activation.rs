//! Activation functions, elementwise.
//!
//! - ReLU(x) = max(0, x)
//! - GELU(x) = x · Φ(x) = ½ x (1 + erf(x / √2))          (BERT, torch `gelu`)
//! - GELU-tanh(x) = ½ x (1 + tanh(√(2/π) (x + 0.044715 x³)))  (GPT-2, Gemma)
//! - SiLU(x) = x · σ(x) = x / (1 + e⁻ˣ)                    (LLaMA's SwiGLU gate)
//!
//! The tensor functions run the SIMD versions of [`crate::ops::simd`] (erf, tanh and
//! σ by polynomial and exp, within 1e-6 of the f64 twins below) and split large tensors
//! across threads.

use serde::{Deserialize, Serialize};

use crate::ops::simd::{self, Unary};
use crate::tensor::Tensor;

/// Which nonlinearity a feed-forward network uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// max(0, x)
    Relu,
    /// x · Φ(x), with the exact erf
    Gelu,
    /// the tanh approximation of GELU
    GeluTanh,
    /// x · σ(x)
    Silu,
}

impl Activation {
    /// Apply to every element of `x`.
    pub fn apply(self, x: &Tensor) -> Tensor {
        match self {
            Activation::Relu => relu(x),
            Activation::Gelu => gelu(x),
            Activation::GeluTanh => gelu_tanh(x),
            Activation::Silu => silu(x),
        }
    }

    /// Apply to one value (the reference twin of [`Activation::apply`]).
    pub fn scalar(self, x: f32) -> f32 {
        match self {
            Activation::Relu => reference::relu(x),
            Activation::Gelu => reference::gelu(x),
            Activation::GeluTanh => reference::gelu_tanh(x),
            Activation::Silu => reference::silu(x),
        }
    }

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
        }
    }
}

/// ReLU, elementwise.
pub fn relu(x: &Tensor) -> Tensor {
    crate::autograd::rules::activation(unary(Unary::Relu, x), x, Activation::Relu)
}

/// GELU with the exact erf, elementwise.
pub fn gelu(x: &Tensor) -> Tensor {
    crate::autograd::rules::activation(unary(Unary::Gelu, x), x, Activation::Gelu)
}

/// GELU, tanh approximation, elementwise.
pub fn gelu_tanh(x: &Tensor) -> Tensor {
    crate::autograd::rules::activation(unary(Unary::GeluTanh, x), x, Activation::GeluTanh)
}

/// SiLU (swish), elementwise.
pub fn silu(x: &Tensor) -> Tensor {
    crate::autograd::rules::activation(unary(Unary::Silu, x), x, Activation::Silu)
}

/// tanh-GELU as llama.cpp's CPU backend computes it, from a table over f16 inputs: the
/// input rounded to f16, ½x(1 + tanh(√(2/π)(x + 0.044715x³))) in f32, the result
/// rounded to f16; exactly 0 at x ≤ −10 and x itself at x ≥ 10. Like llama.cpp, it
/// reads a table of all 65,536 f16 inputs (built on first use).
pub fn gelu_tanh_f16(x: f32) -> f32 {
    use half::f16;
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let table = TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| gelu_tanh_f16_entry(f16::from_bits(b).to_f32()))
            .collect()
    });
    table[f16::from_f32(x).to_bits() as usize]
}

/// One entry of [`gelu_tanh_f16`]'s table: GELU of an f16 value in f32, rounded to f16.
fn gelu_tanh_f16_entry(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let y = 0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)));
    half::f16::from_f32(y).to_f32()
}

/// In place: `x[i] ← act(x[i])` on the SIMD path, on one thread (for callers that own a
/// buffer, e.g. a decode step's hidden row).
pub fn apply_in_place(act: Activation, x: &mut [f32]) {
    simd::map_in_place(unary_of(act), x);
}

fn unary_of(act: Activation) -> Unary {
    match act {
        Activation::Relu => Unary::Relu,
        Activation::Gelu => Unary::Gelu,
        Activation::GeluTanh => Unary::GeluTanh,
        Activation::Silu => Unary::Silu,
    }
}

fn unary(op: Unary, x: &Tensor) -> Tensor {
    let mut out = Tensor::zeros(x.shape());
    simd::map_parallel(op, x.data(), out.data_mut());
    out
}

/// The plain twins: each formula on one value, computed in f64.
pub mod reference {
    /// max(0, x)
    pub fn relu(x: f32) -> f32 {
        x.max(0.0)
    }

    /// ½ x (1 + erf(x / √2))
    pub fn gelu(x: f32) -> f32 {
        let x = x as f64;
        (0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))) as f32
    }

    /// ½ x (1 + tanh(√(2/π) (x + 0.044715 x³)))
    pub fn gelu_tanh(x: f32) -> f32 {
        let x = x as f64;
        let c = (2.0 / std::f64::consts::PI).sqrt();
        (0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())) as f32
    }

    /// x / (1 + e⁻ˣ)
    pub fn silu(x: f32) -> f32 {
        let x = x as f64;
        (x / (1.0 + (-x).exp())) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table holds, for every f16 input, the formula's f16 result; inputs between
    /// f16 values read their f16 neighbour's entry; the tails are 0 and x.
    #[test]
    fn gelu_f16_table_is_the_formula_at_f16_inputs() {
        for i in -12_000..12_000 {
            let x = i as f32 * 9.1e-4;
            let x16 = half::f16::from_f32(x).to_f32();
            let want = if x <= -10.0 {
                0.0
            } else if x >= 10.0 {
                x
            } else {
                gelu_tanh_f16_entry(x16)
            };
            assert_eq!(gelu_tanh_f16(x).to_bits(), want.to_bits(), "x = {x}");
            let exact = reference::gelu_tanh(x16);
            assert!(
                (want - exact).abs() <= 1e-3 * exact.abs().max(1e-3),
                "x = {x}: {want} vs {exact}"
            );
        }
        assert_eq!(gelu_tanh_f16(-11.0), 0.0);
        assert_eq!(gelu_tanh_f16(12.5), 12.5);
    }
}
