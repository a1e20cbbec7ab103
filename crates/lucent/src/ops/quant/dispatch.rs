//! Which kernel runs: the dot kernels of a storage type at an instruction-set level
//! ([`dot_kernel`]), llama.cpp's orders for the K-quants ([`KOrder`]) and the kernels of
//! each ([`repacked_kernels`], [`tiled_kernels`]), and the checked entry point
//! [`vec_dot`]. The level is a parameter ([`Isa`]); the public entry points read it from
//! the runtime they run in ([`crate::runtime::isa`]).

use crate::ops::quant::activations::QuantizedActs;
use crate::ops::quant::reference;
#[cfg(target_arch = "x86_64")]
use crate::ops::quant::{avx2, avx2_float, avx2_lowbit, avx512};
use crate::runtime::Isa;
use crate::tensor::quant::GgmlType;
#[cfg(test)]
use crate::{Error, Result};

#[cfg(test)]
/// Errors unless `a` was prepared for `dtype` weights and `row` is one row of `a.len`
/// numbers of `dtype`.
pub(crate) fn check_dot(dtype: GgmlType, row: &[u8], a: &QuantizedActs) -> Result<()> {
    if a.kind != dtype.activation_kind() {
        return Err(Error::Argument(format!(
            "activations prepared as {:?} cannot meet {dtype} weights (they need {:?}); \
             quantise them with quantize_activations({dtype}, x)",
            a.kind,
            dtype.activation_kind()
        )));
    }
    let need = dtype.row_bytes(a.len)?;
    if row.len() != need {
        return Err(Error::Shape(format!(
            "{dtype} dot: a row of {} numbers is {need} bytes, got {}",
            a.len,
            row.len()
        )));
    }
    Ok(())
}

/// `w · x` for one weight row of `dtype` and prepared activations, on the instruction
/// set of the runtime it runs in (AVX-512 VNNI for the K-quants, AVX2 + FMA, else the
/// [`reference`](mod@super::reference) twin).
#[cfg(test)]
pub(crate) fn vec_dot(dtype: GgmlType, row: &[u8], a: &QuantizedActs) -> Result<f32> {
    check_dot(dtype, row, a)?;
    Ok(dot_kernel(dtype, crate::runtime::isa())(row, a))
}

/// A checked dot kernel: the row and activations already agree in length and kind.
pub(crate) type DotFn = fn(&[u8], &QuantizedActs) -> f32;

/// A dot kernel of one weight row with four activation rows (`avx512::kernel4`).
pub(crate) type Dot4Fn = fn(&[u8], [&QuantizedActs; 4]) -> [f32; 4];

/// A tile kernel: dots of `RW` weight rows (with their scale tables) and `RA` prepared
/// activation rows (`avx2::tile`, `avx512::decode::tile`).
#[cfg(target_arch = "x86_64")]
pub(crate) type Tile<const RW: usize, const RA: usize> =
    unsafe fn([&[u8]; RW], [&[f32]; RW], [&QuantizedActs; RA], &mut [[f32; RA]; RW]);

/// The dot kernel for `dtype` at `isa` (a level the CPU runs: the runtime caps it).
pub(crate) fn dot_kernel(dtype: GgmlType, isa: Isa) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return avx512::kernel(dtype);
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return avx2::kernel(dtype);
    }
    reference::kernel(dtype)
}

/// The prompt kernels in the order of llama.cpp's tinyBLAS (`llamafile_sgemm`: one
/// eight-lane chain per output) at `isa`, one activation row and four: a float weight
/// type's (`F32`, `F16`, `BF16`; only for rows whose length is a multiple of 8) and
/// IQ4_NL's ([`takes_chain`] says when); None for the other types.
pub(crate) fn chain_kernels(dtype: GgmlType, isa: Isa) -> Option<(DotFn, Dot4Fn)> {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        if dtype == GgmlType::IQ4_NL {
            return Some(avx2_lowbit::iq4_nl_chain_kernels());
        }
        return avx2_float::chain_kernels(dtype);
    }
    reference::chain_kernels(dtype)
}

/// Whether llama.cpp's AVX2 build multiplies a `dtype` weight of `rows × cols` by `t`
/// activation rows with tinyBLAS (one chain per output) rather than one `vec_dot` per
/// output (`rows` counts the whole product's rows, e.g. a fused QKV matrix's):
///
/// - a float weight (F32, F16, BF16): a prompt (`t ≥ 2`) with `cols % 8 == 0` and
///   `rows % 4 == 0`;
/// - IQ4_NL: a prompt (`t ≥ 2`) with a matrix it has not repacked (`rows % 8 != 0`,
///   [`is_repacked`]); its tiled product does not take IQ4_NL, and tinyBLAS's
///   `tinyBLAS_Q0_AVX` takes any rows and any whole number of blocks.
pub(crate) fn takes_chain(dtype: GgmlType, rows: usize, cols: usize, t: usize) -> bool {
    match dtype {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            t >= 2 && cols.is_multiple_of(8) && rows.is_multiple_of(4)
        }
        GgmlType::IQ4_NL => t >= 2 && !is_repacked(dtype, rows),
        _ => false,
    }
}

/// Which of llama.cpp's kernels a K-quant dot sums like: its arithmetic differs between
/// them in the f32 steps (the integer parts are exact in all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KOrder {
    /// `ggml_vec_dot_q4_K_q8_K` / `_q5_K_`: eight lanes per block, the minimums apart.
    Dot,
    /// `ggml_gemv_q4_K_8x8_q8_K` (repacked Q4_K, one activation row): one chain, one
    /// step per block.
    Gemv,
    /// `ggml_gemm_q4_K_8x8_q8_K` (repacked Q4_K, activation rows in fours): one chain,
    /// one step per 64 numbers. (Its four-row quantiser gives a block whose largest
    /// magnitude comes with both signs the positive one's scale, where the one-row
    /// quantiser takes the first's: that flips the signs of the block's q and d together,
    /// which no product sees, so lucent quantises all rows alike.)
    Gemm,
    /// llama.cpp's tiled K-quant product (`ggml_compute_forward_mul_mat_tiled`, AVX2),
    /// which it takes for a product of 8 activation rows or more (Q4_K not repacked,
    /// Q5_K, Q6_K): one chain, per block `fma(d·S − dmin·M, dx)` with `S` and `M` the
    /// block's exact integer totals.
    Tiled,
}

/// The number of activation rows from which llama.cpp multiplies a K-quant matrix that
/// it has not repacked with its tiled kernel ([`KOrder::Tiled`]).
pub(crate) const TILED_MIN_ROWS: usize = 8;

/// Whether llama.cpp keeps a `dtype` matrix of `rows` rows repacked on an AVX2 CPU
/// (interleaved eight rows at a time and multiplied with its own kernels): Q4_0, Q4_K
/// and IQ4_NL with a multiple of 8 rows.
pub(crate) fn is_repacked(dtype: GgmlType, rows: usize) -> bool {
    matches!(dtype, GgmlType::Q4_0 | GgmlType::Q4_K | GgmlType::IQ4_NL) && rows.is_multiple_of(8)
}

/// The kernels of a repacked matrix ([`is_repacked`]) at `isa`: one activation row and
/// four (Q4_K: [`KOrder::Gemv`] and [`KOrder::Gemm`]; IQ4_NL and Q4_0: one chain per
/// output in both, [`reference::dot_iq4_nl_repacked`], [`reference::dot_q4_0_repacked`]).
pub(crate) fn repacked_kernels(dtype: GgmlType, isa: Isa) -> (DotFn, Dot4Fn) {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return avx512::repacked_kernels(dtype);
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return avx2::repacked_kernels(dtype);
    }
    reference::repacked_kernels(dtype)
}

/// The K-quant kernels of `dtype` in llama.cpp's tiled order ([`KOrder::Tiled`]) on
/// `isa`, one activation row and four; None for the other types.
pub(crate) fn tiled_kernels(dtype: GgmlType, isa: Isa) -> Option<(DotFn, Dot4Fn)> {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return avx512::tiled_kernels(dtype);
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return avx2::tiled_kernels(dtype);
    }
    reference::tiled_kernels(dtype)
}
