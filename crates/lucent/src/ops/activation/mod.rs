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
//!
//! llama.cpp's own arithmetic for the gated activations ([`Numerics::LlamaCpp`]): its f16
//! tanh-GELU table here ([`gelu_tanh_f16`]), its vector exp and SiLU in [`llama_cpp`];
//! [`in_place_for`] picks the one a [`Numerics`] asks for.

pub(crate) mod llama_cpp;

use serde::{Deserialize, Serialize};

use crate::ops::simd::{self, Unary};
use crate::runtime::pool::in_pool;
use crate::runtime::Numerics;
use crate::tensor::tape::{needs_grad, record};
use crate::tensor::Tensor;
use rayon::prelude::*;

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
    record_activation(unary(Unary::Relu, x), x, Activation::Relu)
}

/// GELU with the exact erf, elementwise.
pub fn gelu(x: &Tensor) -> Tensor {
    record_activation(unary(Unary::Gelu, x), x, Activation::Gelu)
}

/// GELU, tanh approximation, elementwise.
pub fn gelu_tanh(x: &Tensor) -> Tensor {
    record_activation(unary(Unary::GeluTanh, x), x, Activation::GeluTanh)
}

/// SiLU (swish), elementwise.
pub fn silu(x: &Tensor) -> Tensor {
    record_activation(unary(Unary::Silu, x), x, Activation::Silu)
}

/// tanh-GELU as llama.cpp's CPU backend computes it, from a table over f16 inputs: the
/// input rounded to f16, ½x(1 + tanh(√(2/π)(x + 0.044715x³))) in f32, the result
/// rounded to f16; exactly 0 at x ≤ −10 and x itself at x ≥ 10. Like llama.cpp, it
/// reads a table of all 65,536 f16 inputs (built on first use).
pub(crate) fn gelu_tanh_f16(x: f32) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    gelu_f16_table()[half::f16::from_f32(x).to_bits() as usize]
}

/// The in-place kernel of `act` in `numerics`' own arithmetic, where it has one: under
/// llama.cpp's numerics tanh-GELU from its f16 table ([`gelu_tanh_f16_in_place`]) and its
/// SiLU ([`llama_cpp::silu_in_place`]); `None` for lucent's numerics and for the other
/// activations (they run [`Activation::apply`]).
pub(crate) fn in_place_for(act: Activation, numerics: Numerics) -> Option<fn(&mut [f32])> {
    match (numerics.llama_cpp(), act) {
        (true, Activation::GeluTanh) => Some(gelu_tanh_f16_in_place),
        (true, Activation::Silu) => Some(llama_cpp::silu_in_place),
        _ => None,
    }
}

/// Numbers from which [`gated_in_place`] splits its work over the threads.
const GATED_PARALLEL_MIN: usize = 1 << 15;

/// A gated activation in place: `g ← act(g) · u` number by number, with `act` applied to
/// the whole of `g` in place (e.g. [`gelu_tanh_f16_in_place`]); in chunks over the threads
/// when there are many numbers (a prompt's), with the same result.
pub(crate) fn gated_in_place(
    g: &mut [f32],
    u: &[f32],
    act: impl Fn(&mut [f32]) + Sync,
) -> crate::Result<()> {
    if g.len() != u.len() {
        return Err(crate::Error::mismatch(
            "gated activation (gate vs up)",
            &[g.len()],
            &[u.len()],
        ));
    }
    let run = |gc: &mut [f32], uc: &[f32]| {
        act(gc);
        for (x, &y) in gc.iter_mut().zip(uc) {
            *x *= y;
        }
    };
    let threads = crate::threads::threads();
    if threads > 1 && g.len() >= GATED_PARALLEL_MIN {
        let chunk = g.len().div_ceil(threads);
        crate::threads::for_each_chunk_mut(g, chunk, |c, gc| run(gc, &u[c * chunk..][..gc.len()]));
    } else {
        run(g, u);
    }
    Ok(())
}

/// The 65,536 entries of [`gelu_tanh_f16`]'s table, by f16 bit pattern (built once).
fn gelu_f16_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| gelu_tanh_f16_entry(half::f16::from_bits(b).to_f32()))
            .collect()
    })
}

/// [`gelu_tanh_f16`] of every number in place: the same numbers, with the f16 keys of
/// eight inputs at a time from the CPU's F16C conversion when it has one.
pub(crate) fn gelu_tanh_f16_in_place(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::runtime::isa() >= crate::runtime::Isa::Avx2 {
        // SAFETY: the AVX2 level includes F16C and AVX; the runtime caps it to the CPU's.
        unsafe { gelu_tanh_f16_f16c(x, gelu_f16_table()) };
        return;
    }
    x.iter_mut().for_each(|v| *v = gelu_tanh_f16(*v));
}

/// [`gelu_tanh_f16_in_place`] with F16C keys.
///
/// # Safety
/// The CPU must have F16C and AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn gelu_tanh_f16_f16c(x: &mut [f32], table: &[f32]) {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact_mut(8);
    for ch in &mut chunks {
        let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm256_loadu_ps(ch.as_ptr()));
        let mut keys = [0u16; 8];
        _mm_storeu_si128(keys.as_mut_ptr() as *mut __m128i, h);
        for (v, &k) in ch.iter_mut().zip(&keys) {
            *v = if *v <= -10.0 {
                0.0
            } else if *v >= 10.0 {
                *v
            } else {
                table[k as usize]
            };
        }
    }
    chunks
        .into_remainder()
        .iter_mut()
        .for_each(|v| *v = gelu_tanh_f16(*v));
}

/// One entry of [`gelu_tanh_f16`]'s table: GELU of an f16 value in f32, rounded to f16.
fn gelu_tanh_f16_entry(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    // 1 + 0.044715·x·x is one fused multiply-add: the C compiler contracts it so in
    // llama.cpp's build (x86-64 with FMA), and rounding it in two steps moves some f16
    // entries by one place (e.g. x = −1.999: −0.04547 instead of −0.0455).
    let y = 0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI * x * (0.044715 * x).mul_add(x, 1.0)));
    half::f16::from_f32(y).to_f32()
}

/// In place: `x[i] ← act(x[i])` on the SIMD path, on one thread (Whisper's conv stem;
/// the tests hold it to the PyTorch values beside [`Activation::apply`]).
pub(crate) fn apply_in_place(act: Activation, x: &mut [f32]) {
    let op = match act {
        Activation::Relu => Unary::Relu,
        Activation::Gelu => Unary::Gelu,
        Activation::GeluTanh => Unary::GeluTanh,
        Activation::Silu => Unary::Silu,
    };
    simd::map_in_place(op, x);
}

fn unary(op: Unary, x: &Tensor) -> Tensor {
    let mut out = Tensor::zeros(x.shape());
    simd::map_parallel(op, x.data(), out.data_mut());
    out
}

/// The plain twins: each formula on one value, computed in f64.
pub(crate) mod reference {
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

// ------------------------------------------------------------------ backward

// The recording of the activations on the tape, and their derivatives.
/// f′(x) of each activation (f64 arithmetic: the plain twin of [`activation_grad_row`]).
pub(crate) fn activation_derivative(act: Activation, x: f32) -> f32 {
    let x = x as f64;
    let d = match act {
        Activation::Relu => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        Activation::Gelu => {
            // d/dx [x Φ(x)] = Φ(x) + x φ(x)
            let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            cdf + x * pdf
        }
        Activation::GeluTanh => crate::ops::simd::reference::gelu_tanh_derivative(x as f32) as f64,
        Activation::Silu => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 + x * (1.0 - s))
        }
    };
    d as f32
}

/// gx = g ⊙ f′(x) over a row, in f32 (tanh through one `exp`), for speed; held to
/// [`activation_derivative`] in the tests.
pub(crate) fn activation_grad_row(act: Activation, x: &[f32], g: &[f32], gx: &mut [f32]) {
    match act {
        Activation::GeluTanh => crate::ops::simd::gelu_tanh_backward(x, g, gx),
        Activation::Silu => {
            for ((d, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                let s = 1.0 / (1.0 + (-xv).exp());
                *d = gv * s * (1.0 + xv * (1.0 - s));
            }
        }
        Activation::Relu => {
            for ((d, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                *d = if xv > 0.0 { gv } else { 0.0 };
            }
        }
        Activation::Gelu => {
            for ((d, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                *d = gv * activation_derivative(act, xv);
            }
        }
    }
}

/// Recording for the activations ([`crate::ops::relu`], `gelu`, `gelu_tanh`, `silu`).
pub(crate) fn record_activation(out: Tensor, x: &Tensor, act: Activation) -> Tensor {
    if !needs_grad(&[x]) {
        return out.with_grad_node(None);
    }
    let xs = x.detach();
    record(out, act.name(), &[x], move |g| {
        let mut gx = vec![0.0f32; xs.numel()];
        in_pool(|| {
            gx.par_chunks_mut(4096)
                .zip(xs.data().par_chunks(4096).zip(g.data().par_chunks(4096)))
                .for_each(|(dst, (x, g))| activation_grad_row(act, x, g, dst))
        });
        Ok(vec![Some(Tensor::new(gx, xs.shape())?)])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gated_in_place_equals_one_by_one_on_threads() -> crate::Result<()> {
        // Above the threshold (split over the threads) and below it, odd lengths; at
        // every instruction-set level this CPU has.
        for isa in crate::Isa::available() {
            let rt = crate::Runtime::builder().threads(2).isa(isa).build()?;
            for n in [GATED_PARALLEL_MIN * 3 + 7, 1001] {
                let g: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin() * 6.0).collect();
                let u: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.11).cos()).collect();
                let mut got = g.clone();
                rt.install(|| gated_in_place(&mut got, &u, gelu_tanh_f16_in_place))?;
                for i in 0..n {
                    let want = gelu_tanh_f16(g[i]) * u[i];
                    assert_eq!(got[i].to_bits(), want.to_bits(), "{isa}: n {n}, number {i}");
                }
            }
        }
        let mut g = vec![0.0; 3];
        assert!(gated_in_place(&mut g, &[1.0; 2], gelu_tanh_f16_in_place).is_err());
        Ok(())
    }

    #[test]
    fn gelu_tanh_f16_in_place_equals_one_by_one() {
        // Through the table's range, its ±10 edges, f16 overflow, NaN and a short tail.
        let mut x: Vec<f32> = (-30_000..=30_000).map(|i| i as f32 * 0.0005).collect();
        x.extend([
            -10.0,
            10.0,
            -9.999,
            9.999,
            7e4,
            -7e4,
            f32::NAN,
            f32::INFINITY,
            1.0,
        ]);
        crate::ops::assert_in_place_equals_one_by_one(
            &x,
            gelu_tanh_f16_in_place,
            gelu_tanh_f16,
            "gelu_tanh_f16",
        );
    }

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
