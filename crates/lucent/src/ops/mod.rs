//! Kernels: the arithmetic every building block stands on.
//!
//! Each op has a public entry point over [`Tensor`](crate::Tensor)s (what `nn` calls) and, beside any
//! fast version, a plain `reference` twin that reads like the formula. Tests hold the
//! fast path to its twin on random and awkward shapes, and the twin to PyTorch.
//!
//! An op whose arithmetic a [`crate::Numerics`] value changes keeps each variant beside
//! it, in a file named for the variant (`rope/llama_cpp.rs`: llama.cpp's order), and its
//! entry point takes the value (`rope::apply(.., numerics)`, `AttentionParams::numerics`).
//!
//! | file | ops |
//! | --- | --- |
//! | `matmul` | `matmul`, `matmul_t` (A·Bᵀ), `linear` (x·Wᵀ + b), batched, on the `gemm` crate |
//! | `screened_head` | a vocabulary head's logits in int8 with every row that can be the largest computed exactly (a bound per row): greedy decoding keeps the exact head's choice |
//! | `linear_kernel` | lucent's own x·Wᵀ + b kernel for many rows (AVX2 tiles, W in place, one summation order per number: batch-invariant) |
//! | `linear_bf16` | x·Wᵀ + b in bf16 products with f32 sums (`--precision bf16`): W rounded once, rows of x per row, `vdpbf16ps` (AVX512-BF16) tiles, emulated on AVX2 with the same bits, a plain twin |
//! | `linear_int8` | x·Wᵀ + b in 8-bit integers (`--precision int8`): W quantised once per output channel, rows of x per row, VNNI / AVX2 tiles with a plain twin |
//! | `softmax` | softmax over the last axis, with temperature; `softmax/llama_cpp`: llama.cpp's row softmax |
//! | `norm` | LayerNorm (PyTorch semantics), RMSNorm |
//! | `activation` | ReLU, GELU (erf and tanh), SiLU; `activation/llama_cpp`: llama.cpp's exp and SiLU |
//! | `rope` | rotary position embedding, rotate-half and interleaved conventions; `rope/llama_cpp`: llama.cpp's angles |
//! | `attention` | fused scaled dot-product attention that can also write its weights; `attention/llama_cpp`: llama.cpp's f16 attention |
//! | `f16_dot` | dot products of f16 values in llama.cpp's two summation orders (`F16Order`) |
//! | `simd` | AVX2 exp / erf / tanh / sigmoid, dot, axpy, matrix-vector, with scalar twins |
//! | `quant/` | quantised blocks: dequantisation, activation quantisation, dot kernels per instruction set, `QMatrix` |

pub mod activation;
pub mod attention;
pub(crate) mod f16_dot;
#[cfg(test)]
mod kernel_tests;
pub mod linear_bf16;
pub mod linear_int8;
pub mod linear_kernel;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod quant;
pub mod rope;
pub mod screened_head;
pub(crate) mod simd;
pub mod softmax;

/// Whether the FMA-compiled paths run at `isa` (AVX2 and FMA): the same operations,
/// inlined and vectorised instead of calls to the C library's `fmaf`.
pub(crate) fn fma_at(isa: crate::Isa) -> bool {
    cfg!(target_arch = "x86_64") && isa >= crate::Isa::Avx2
}

/// Whether the AVX-512 softmax runs at `isa` (AVX-512F besides AVX2 and FMA).
pub(crate) fn avx512_at(isa: crate::Isa) -> bool {
    cfg!(target_arch = "x86_64") && isa >= crate::Isa::Avx512
}

/// Test helper: `in_place` over `x` gives `one` of each number, bit for bit (any NaN
/// for a NaN), at every instruction-set level this CPU has.
#[cfg(test)]
pub(crate) fn assert_in_place_equals_one_by_one(
    x: &[f32],
    in_place: fn(&mut [f32]),
    one: fn(f32) -> f32,
    what: &str,
) {
    for isa in crate::Isa::available() {
        let rt = crate::Runtime::builder()
            .threads(1)
            .isa(isa)
            .build()
            .expect("a runtime");
        let mut got = x.to_vec();
        rt.install(|| in_place(&mut got));
        for (&xi, &g) in x.iter().zip(&got) {
            let want = one(xi);
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{isa}: {what}({xi:e}) = {want:e}, in place {g:e}"
            );
        }
    }
}

pub use activation::{gelu, gelu_tanh, relu, silu, Activation};
pub use attention::{attention, AttentionOutput, AttentionParams};
pub use loss::{cross_entropy, log_softmax};
pub use matmul::{linear, linear_packed, matmul, matmul_t};
pub use norm::{layer_norm, rms_norm};
pub use rope::{rope, rope_with, RopeConvention, RopeFreqs, RopeScaling};
pub use softmax::{softmax, softmax_with_temperature};
