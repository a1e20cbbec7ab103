//! Quantised arithmetic: GGUF blocks ([`crate::tensor::quant`]) widened to f32, and dot
//! products of a quantised weight row with an activation row quantised on the fly.
//!
//! [`dequantize`] is the plain definition, bit for bit (every value is computed in f32 as
//! the block formulas say, in that order). The dot product `w · x` of a weight row with an
//! f32 activation row first quantises `x` to 8 bits per value ([`quantize_activations`]):
//! `Q8_0`-style blocks of 32 (`x ≈ dx · qx`, `dx = max|x| / 127` kept in f16) against the
//! 32-blocks, `Q8_K`-style blocks of 256 (one f32 scale plus the sum of every 16 `qx`)
//! against the K-quants, as llama.cpp does. Then the inner sums are exact integer
//! arithmetic:
//!
//! `w · x ≈ Σ_blocks d · dx · Σ_i (q_i − o) · qx_i` (+ `m · dx · Σ qx_i` for the `_1` kinds,
//! − `dmin · dx · Σ_j mn_j · Σ_{i∈j} qx_i` for Q4_K/Q5_K, using the stored 16-sums).
//!
//! So the quantised dot equals `dequantize(w) · dequantize(qx)` up to f32 rounding, and
//! differs from `dequantize(w) · x` by at most `Σ_i |w_i| · dx(i) / 2` (each activation is
//! rounded to the nearest multiple of its block's `dx`).
//!
//! The f32 steps around those integer sums follow llama.cpp's CPU kernels (AVX2 build)
//! order for order, so a GGUF model gives llama.cpp's numbers to the bit: the 32-block
//! dots' eight lanes, and for the K-quants the order of whichever kernel llama.cpp would
//! run for that product (`KOrder`: its dot, its repacked Q4_K kernels, its tiled product
//! for prompts of 8 rows or more).
//!
//! Every dot has a scalar twin in [`reference`](mod@reference), in the same order; the
//! AVX2 + FMA and AVX-512 VNNI kernels equal their twins bit for bit, and which one runs
//! is the runtime's instruction-set level ([`crate::runtime::Isa`]). [`QMatrix`] is a
//! rows × cols weight matrix in one of these types, with a decode path (`matvec`,
//! streaming the quantised weights once) and a prefill path (`matmul_t_quantized`, every
//! row as a decoded row is computed; `matmul_t`, dequantised tiles through the f32 GEMM).
//!
//! | file | holds |
//! | --- | --- |
//! | `dequant` | [`dequantize`]: blocks to f32 by definition |
//! | `activations` | [`QuantizedActs`], [`quantize_activations`] (llama.cpp's rules) |
//! | `dispatch` | the kernel of a type at a level, llama.cpp's K-quant orders, [`vec_dot`] |
//! | `reference` | the scalar twins |
//! | `avx2` | AVX2 + FMA kernels: the 32-block dots and tiles, the K-quant dots |
//! | `avx2_kgemm` | AVX2 prompt kernel of repacked Q4_K: eight weight rows decoded once, four activation rows a call |
//! | `avx2_kgemv` | AVX2 token kernel of repacked Q4_K: eight weight rows a call, one register of eight outputs |
//! | `avx2_float` | AVX2 + FMA + F16C kernels of F32, F16, BF16 (`vec_dot`'s and tinyBLAS's orders; also at the AVX-512 level) |
//! | `avx2_lowbit` | AVX2 + FMA kernels of Q2_K, Q3_K, IQ4_NL, IQ4_XS (IQ4_NL's also at the AVX-512 level) |
//! | `avx2_quantize` | AVX2 quantisation of activation rows (Q8_0 and Q8_K blocks) |
//! | `avx512/` | AVX-512 VNNI kernels: K-quants, decode tiles, prefill tiles, quantisation |
//! | `matrix` | [`QMatrix`] and the scheduling of its products over the threads |
//! | `int8_blocks` | [`BlockInt8Matrix`]: block-integer int8 (the blocks' own integers, widened once; llama.cpp's activation integers; one f32 rescale per block) |

mod activations;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_float;
#[cfg(target_arch = "x86_64")]
mod avx2_kgemm;
#[cfg(target_arch = "x86_64")]
mod avx2_kgemv;
#[cfg(target_arch = "x86_64")]
mod avx2_lowbit;
#[cfg(target_arch = "x86_64")]
mod avx2_quantize;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod dequant;
mod dispatch;
mod int8_blocks;
mod matrix;
pub(crate) mod reference;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use activations::quantize_activations;
pub use activations::QuantizedActs;
pub(crate) use dequant::dequantize;
#[cfg(test)]
pub(crate) use dispatch::vec_dot;
pub use int8_blocks::BlockInt8Matrix;
pub use matrix::QMatrix;
