//! `Linear`: the affine map every projection in a Transformer is made of.
//!
//! y = x · Wᵀ + b, with W stored (out, in) as PyTorch's `nn.Linear` stores it, so
//! checkpoint weights are used as they are.
//!
//! W is a [`Weight`]: an f32 [`Tensor`], or a GGUF quantised matrix ([`QMatrix`]) used
//! as it is stored. For a quantised W:
//! - one row of x (decoding a token): the quantised rows are streamed once, each dotted
//!   with x quantised on the fly to 8 bits ([`QMatrix::matvec`]; llama.cpp's arithmetic);
//! - many rows (prefill): every output number is computed exactly as the one-row path
//!   computes it ([`QMatrix::matmul_t_quantized`]), each weight row read once for all
//!   rows of x. This batch invariance matters: with 8-bit activations the model is
//!   chaotic at the level of rounding (a one-ulp change of the input moves SmolLM2's
//!   logits by ~0.1, as an activation crosses a rounding boundary and the change grows
//!   layer by layer), so a prefill with another summation order (e.g. dequantised
//!   weights through the f32 GEMM) would not reproduce token-by-token decoding.
//!
//! A model opened in int8 or bf16 ([`Linear::keep_int8`], [`Linear::keep_bf16`]) keeps a
//! copy of W, and every product, one row or many, reads the copy instead; its rows
//! never depend on each other either. In int8 W is quantised per output channel
//! ([`Int8Matrix`]; a quantised W dequantised first); [`Linear::keep_int8_blocks`]
//! keeps a quantised W's blocks' own integers instead, widened once to one `i8` a
//! weight ([`BlockInt8Matrix`]: llama.cpp's activation integers, one f32 rescale per
//! block, only the rescales' order differs from the exact mode's; closer to exact,
//! not yet faster: docs/precision.md). In bf16 W is rounded (a quantised W
//! dequantised first).

use std::sync::Arc;

use rand::Rng;

use crate::ops;
use crate::ops::linear_bf16::Bf16Matrix;
use crate::ops::linear_int8::Int8Matrix;
use crate::ops::linear_kernel::PackedNt;
use crate::ops::quant::{BlockInt8Matrix, QMatrix};
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A weight matrix (out, in): f32, or quantised blocks read from a GGUF file.
#[derive(Clone, Debug)]
pub enum Weight {
    /// f32 numbers (out, in).
    F32(Tensor),
    /// Quantised rows; `shape` = [rows, cols] = (out, in).
    Quant {
        /// The stored blocks.
        matrix: QMatrix,
        /// [out, in]
        shape: [usize; 2],
    },
}

impl From<Tensor> for Weight {
    fn from(t: Tensor) -> Weight {
        Weight::F32(t)
    }
}

impl From<QMatrix> for Weight {
    fn from(m: QMatrix) -> Weight {
        let shape = [m.rows(), m.cols()];
        Weight::Quant { matrix: m, shape }
    }
}

impl Weight {
    /// The shape (out, in) (for an f32 weight, whatever its tensor's shape is).
    pub fn shape(&self) -> &[usize] {
        match self {
            Weight::F32(t) => t.shape(),
            Weight::Quant { shape, .. } => shape,
        }
    }

    /// The number of weights.
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// The f32 tensor, if this weight is f32.
    pub fn as_f32(&self) -> Option<&Tensor> {
        match self {
            Weight::F32(t) => Some(t),
            Weight::Quant { .. } => None,
        }
    }

    /// The f32 tensor, writable, if this weight is f32 (quantised weights do not train).
    pub fn as_f32_mut(&mut self) -> Option<&mut Tensor> {
        match self {
            Weight::F32(t) => Some(t),
            Weight::Quant { .. } => None,
        }
    }

    /// The quantised matrix, if this weight is quantised.
    pub fn as_quant(&self) -> Option<&QMatrix> {
        match self {
            Weight::F32(_) => None,
            Weight::Quant { matrix, .. } => Some(matrix),
        }
    }

    /// The whole matrix as f32 (a copy when quantised: dequantised).
    pub fn to_f32(&self) -> Result<Tensor> {
        match self {
            Weight::F32(t) => Ok(t.clone()),
            Weight::Quant { matrix, shape } => Tensor::new(matrix.dequantize_all()?, shape),
        }
    }

    /// Rows `ids` as f32 (an embedding lookup): only those rows are dequantised.
    ///
    /// # Shapes
    /// (n, d) → (ids.len(), d)
    pub fn select_rows(&self, ids: &[usize]) -> Result<Tensor> {
        match self {
            Weight::F32(t) => t.select_rows(ids),
            Weight::Quant { matrix, shape } => {
                let [n, d] = *shape;
                let mut out = Vec::with_capacity(ids.len() * d);
                for &i in ids {
                    if i >= n {
                        return Err(Error::Argument(format!(
                            "index {i} is out of range for a table of {n} rows"
                        )));
                    }
                    out.extend(matrix.dequantize_rows(i..i + 1)?);
                }
                Tensor::new(out, &[ids.len(), d])
            }
        }
    }

    /// y = x · Wᵀ for `rows` rows of x (no bias): the f32 GEMM, or for a quantised W the
    /// one-row streaming path / the many-row path, whose rows follow `numerics` (module
    /// docs).
    ///
    /// # Shapes
    /// x: rows × in (flat) → rows × out (flat)
    pub fn matmul_t(&self, x: &Tensor, numerics: Numerics) -> Result<Tensor> {
        match self {
            Weight::F32(w) => linear_f32(x, w, None, None, numerics),
            Weight::Quant { matrix, shape } => {
                let [out, inp] = *shape;
                if x.last_dim() != inp || x.rank() == 0 {
                    return Err(Error::mismatch(
                        "linear (x vs quantised weight (out, in))",
                        x.shape(),
                        shape,
                    ));
                }
                let rows = x.numel() / inp.max(1);
                let y = if rows == 1 {
                    matrix.matvec(x.data())?
                } else {
                    matrix.matmul_t_quantized(x.data(), rows, numerics)?
                };
                let mut s = x.shape().to_vec();
                *s.last_mut().unwrap_or(&mut 0) = out;
                Tensor::new(y, &s)
            }
        }
    }
}

/// `ops::linear` for an f32 weight (reading `packed`, W packed once, where given); with
/// [`Numerics::RowInvariant`] each row of x takes the one-row kernel alone (a decoded
/// token's arithmetic, not the GEMM's), so a batch of decoded tokens equals decoding
/// each alone.
///
/// # Shapes
/// x: (..., in), w: (out, in), b: (out) → (..., out)
fn linear_f32(
    x: &Tensor,
    w: &Tensor,
    packed: Option<&PackedNt>,
    b: Option<&Tensor>,
    numerics: Numerics,
) -> Result<Tensor> {
    let inp = x.last_dim();
    let rows = x.numel().checked_div(inp).unwrap_or(0);
    if rows <= 1 || x.rank() == 0 || !numerics.row_invariant() {
        return ops::linear_packed(x, w, packed, b);
    }
    let flat = x.reshape(&[rows, inp])?; // (rows, in)
    let parts = (0..rows)
        .map(|r| ops::linear(&flat.narrow(0, r, 1)?, w, b)) // (1, out)
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Tensor> = parts.iter().collect();
    let mut shape = x.shape().to_vec();
    if let (Some(last), Some(&out)) = (shape.last_mut(), w.shape().first()) {
        *last = out;
    }
    Tensor::cat(&refs, 0)?.reshape(&shape) // (..., out)
}

/// A linear layer y = x · Wᵀ + b.
#[derive(Clone, Debug)]
pub struct Linear {
    /// W: (out, in), f32 or quantised
    pub weight: Weight,
    /// b: (out), if any
    pub bias: Option<Tensor>,
    /// W's numbers in f16, when they all are f16 values and the model asked to keep
    /// them ([`Linear::keep_f16`]): a one-row product reads these, half the bytes, for
    /// the same numbers.
    half: Option<Arc<Vec<half::f16>>>,
    /// W packed once into the f32 kernel's panels, when the model asked for it
    /// ([`Linear::keep_packed`]): a product of several rows reads these instead of
    /// packing W's blocks on every call, for the same numbers.
    packed: Option<Arc<PackedNt>>,
    /// W quantised to 8 bits, when the model was opened with
    /// [`Precision::Int8`](crate::Precision::Int8) ([`Linear::keep_int8`]): products
    /// read these instead of W (not the same numbers: the distance is measured).
    int8: Option<Arc<Int8Matrix>>,
    /// A quantised W's block integers widened to `i8` ([`Linear::keep_int8_blocks`]):
    /// products read these instead of W's blocks (the same integers, the rescales in
    /// another order: the distance is measured).
    blocks8: Option<Arc<BlockInt8Matrix>>,
    /// For a probe of which rounding harms ([`Linear::round_inputs_per_row`]): x is
    /// quantised per row to 8 bits and back before an f32 W's product.
    round_inputs: bool,
    /// W rounded to bf16, when the model was opened with
    /// [`Precision::Bf16`](crate::Precision::Bf16) ([`Linear::keep_bf16`]): products
    /// read these instead of W (not the same numbers: the distance is measured).
    bf16: Option<Arc<Bf16Matrix>>,
}

impl Linear {
    /// A layer from its weight (out, in) and optional bias (out); errors name both shapes.
    pub fn new(weight: impl Into<Weight>, bias: Option<Tensor>) -> Result<Self> {
        let weight = weight.into();
        if weight.shape().len() != 2 {
            return Err(Error::Shape(format!(
                "a Linear weight must be (out, in), got {:?}",
                weight.shape()
            )));
        }
        let out = weight.shape()[0];
        if let Some(b) = &bias {
            if b.shape() != [out] {
                return Err(Error::mismatch(
                    "Linear bias vs weight (out, in)",
                    b.shape(),
                    weight.shape(),
                ));
            }
        }
        Ok(Linear {
            weight,
            bias,
            half: None,
            packed: None,
            int8: None,
            blocks8: None,
            round_inputs: false,
            bf16: None,
        })
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
            weight: Weight::F32(Tensor::randn(&[out_features, in_features], std, rng)),
            bias: bias.then(|| Tensor::zeros(&[out_features])),
            half: None,
            packed: None,
            int8: None,
            blocks8: None,
            round_inputs: false,
            bf16: None,
        }
    }

    /// Keep an f16 copy of W for one-row products when every number of W is an f16
    /// value (a model stored in f16, such as Whisper, widened at load): a decode step
    /// then reads half the bytes and gets the same numbers. Returns whether it was kept.
    pub fn keep_f16(&mut self) -> bool {
        let Some(w) = self.weight.as_f32() else {
            return false;
        };
        let h: Vec<half::f16> = w.data().iter().map(|&x| half::f16::from_f32(x)).collect();
        let exact = h
            .iter()
            .zip(w.data())
            .all(|(h, x)| h.to_f32().to_bits() == x.to_bits());
        self.half = exact.then(|| Arc::new(h));
        exact
    }

    /// Keep W packed once for the f32 kernel (a copy: W's bytes again), for a model
    /// that runs many products of a few rows each (an encoder embedding one sentence at
    /// a time): each then streams the packed panels instead of packing W's blocks per
    /// call, for the same numbers. Nothing is kept for quantised weights. Handing W out
    /// to change ([`Linear::forget_copies`], as training does) drops the copy; a caller
    /// that assigns `weight` itself must call this again.
    pub fn keep_packed(&mut self) {
        if let Some(w) = self.weight.as_f32() {
            if let Ok([out, inp]) = w.dims() {
                self.packed = Some(Arc::new(PackedNt::new(w.data(), out, inp)));
            }
        }
    }

    /// Drop the copies kept of W ([`Linear::keep_f16`], [`Linear::keep_packed`]): W is
    /// about to change (an optimiser's step, a checkpoint loaded into it), after which
    /// they would no longer hold its numbers. Products then read W itself.
    pub fn forget_copies(&mut self) {
        self.half = None;
        self.packed = None;
        self.int8 = None;
        self.blocks8 = None;
        self.bf16 = None;
    }

    /// W as f32 numbers (out, in) for a copy in another precision: the f32 weights
    /// themselves, or a quantised W's blocks dequantised (once, here). None where W is
    /// not a matrix or its blocks cannot be read.
    fn widened(&self) -> Option<(std::borrow::Cow<'_, [f32]>, usize, usize)> {
        match &self.weight {
            Weight::F32(w) => {
                let [out, inp] = w.dims().ok()?;
                Some((std::borrow::Cow::Borrowed(w.data()), out, inp))
            }
            Weight::Quant { matrix, shape } => {
                let [out, inp] = *shape;
                let w = matrix.dequantize_all().ok()?; // (out, in)
                Some((std::borrow::Cow::Owned(w), out, inp))
            }
        }
    }

    /// Keep W quantised to 8 bits ([`Int8Matrix`]: one scale per output channel) and
    /// compute every product of an untrained pass from it: what
    /// [`Precision::Int8`](crate::Precision::Int8) asks of a layer. A quantised (GGUF)
    /// W of any block type is widened once: its blocks dequantised to f32, then
    /// quantised per row as an f32 W is, so one integer kernel serves every block type
    /// and a product sums in integers across blocks. Returns whether the copy was made.
    /// ([`Linear::keep_int8_blocks`] keeps the blocks' own integers instead.)
    pub fn keep_int8(&mut self) -> bool {
        let Some((w, out, inp)) = self.widened() else {
            return false;
        };
        let q = Int8Matrix::quantize(&w, out, inp);
        self.blocks8 = None;
        self.int8 = Some(Arc::new(q));
        true
    }

    /// [`Linear::keep_int8`] with the activations quantised in groups of `group`
    /// consecutive inputs, each group its own scale ([`Int8Matrix::quantize_groups`]):
    /// the same 8-bit weights, an outlier input coarsening only its own group.
    /// Returns whether the copy was made; errors if `group` is not a positive multiple
    /// of 4.
    pub fn keep_int8_groups(&mut self, group: usize) -> Result<bool> {
        let Some((w, out, inp)) = self.widened() else {
            return Ok(false);
        };
        let q = Int8Matrix::quantize_groups(&w, out, inp, group)?;
        self.blocks8 = None;
        self.int8 = Some(Arc::new(q));
        Ok(true)
    }

    /// Keep a quantised (GGUF) W's blocks' own integers, widened once to one `i8` a
    /// weight ([`BlockInt8Matrix`]: nothing re-rounded; activations quantised per block
    /// by llama.cpp's rule for W's type, one f32 rescale per block), and compute every
    /// product of an untrained pass from them. Closer to exact than
    /// [`Linear::keep_int8`] (perplexity within 1 % where per-row int8 is 4 % off) but
    /// measured slower than exact on a batched decode step, so not what
    /// [`Precision::Int8`](crate::Precision::Int8) takes yet (docs/precision.md).
    /// Returns whether the copy was made (not for f32, F16 or BF16 weights).
    pub fn keep_int8_blocks(&mut self) -> bool {
        let Weight::Quant { matrix, .. } = &self.weight else {
            return false;
        };
        match BlockInt8Matrix::widen(matrix) {
            Ok(b) => {
                self.int8 = None;
                self.blocks8 = Some(Arc::new(b));
                true
            }
            Err(_) => false,
        }
    }

    /// Keep W rounded to bf16 ([`Bf16Matrix`]) and compute every product of an
    /// untrained pass from it: what [`Precision::Bf16`](crate::Precision::Bf16) asks of a
    /// layer. A quantised (GGUF) W is widened once (its blocks dequantised, then
    /// rounded). Returns whether the copy was made.
    pub fn keep_bf16(&mut self) -> bool {
        let Some((w, out, inp)) = self.widened() else {
            return false;
        };
        let b = Bf16Matrix::round(&w, out, inp);
        self.bf16 = Some(Arc::new(b));
        true
    }

    /// The precision its products run in: int8 or bf16 where [`Linear::keep_int8`] or
    /// [`Linear::keep_bf16`] made a copy, exact otherwise.
    pub fn precision(&self) -> crate::Precision {
        if self.int8.is_some() || self.blocks8.is_some() {
            crate::Precision::Int8
        } else if self.bf16.is_some() {
            crate::Precision::Bf16
        } else {
            crate::Precision::Exact
        }
    }

    /// The bf16 copy of W, if [`Linear::keep_bf16`] made one.
    pub fn bf16(&self) -> Option<&Bf16Matrix> {
        self.bf16.as_deref()
    }

    /// x · Wᵀ + b through the bf16 copy: None where that is not the path (no copy, or a
    /// pass that tracks gradients).
    fn through_bf16(&self, x: &Tensor, bias: Option<&Tensor>) -> Option<Result<Tensor>> {
        let q = self.bf16.as_ref()?;
        if x.tracks_grad() || bias.is_some_and(Tensor::tracks_grad) {
            return None;
        }
        let (inp, out) = (q.k(), q.n());
        if x.rank() == 0 || x.last_dim() != inp {
            return Some(Err(Error::mismatch(
                "linear (x vs bf16 weight (out, in))",
                x.shape(),
                &[out, inp],
            )));
        }
        let rows = x.numel() / inp.max(1);
        let mut y = vec![0.0f32; rows * out];
        q.matmul(&mut y, x.data(), bias.map(Tensor::data), rows);
        let mut shape = x.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = out;
        }
        Some(Tensor::new(y, &shape)) // (..., out)
    }

    /// Whether W is kept packed for the f32 kernel ([`Linear::keep_packed`]).
    pub fn has_packed(&self) -> bool {
        self.packed.is_some()
    }

    /// The 8-bit copy of W, if [`Linear::keep_int8`] made one.
    pub fn int8(&self) -> Option<&Int8Matrix> {
        self.int8.as_deref()
    }

    /// Quantise x per row to 8 bits and back (one symmetric scale per row, as
    /// [`Int8Matrix`] does) before an f32 W's product, when `on`: the activations'
    /// rounding alone, for a probe that tells it from the weights' (docs/precision.md).
    /// Only f32 weights without an int8 or bf16 copy take it.
    pub fn round_inputs_per_row(&mut self, on: bool) {
        self.round_inputs = on;
    }

    /// The widened block integers of W, if [`Linear::keep_int8_blocks`] kept them.
    pub fn block_int8(&self) -> Option<&BlockInt8Matrix> {
        self.blocks8.as_deref()
    }

    /// x · Wᵀ + b through the block integers: None where that is not the path (no copy,
    /// or a pass that tracks gradients).
    fn through_blocks8(&self, x: &Tensor, bias: Option<&Tensor>) -> Option<Result<Tensor>> {
        let q = self.blocks8.as_ref()?;
        if x.tracks_grad() || bias.is_some_and(Tensor::tracks_grad) {
            return None;
        }
        let (inp, out) = (q.k(), q.n());
        if x.rank() == 0 || x.last_dim() != inp {
            return Some(Err(Error::mismatch(
                "linear (x vs block int8 weight (out, in))",
                x.shape(),
                &[out, inp],
            )));
        }
        let rows = x.numel() / inp.max(1);
        let mut y = vec![0.0f32; rows * out];
        if let Err(e) = q.matmul(&mut y, x.data(), bias.map(Tensor::data), rows) {
            return Some(Err(e));
        }
        let mut shape = x.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = out;
        }
        Some(Tensor::new(y, &shape)) // (..., out)
    }

    /// x · Wᵀ + b through the 8-bit copy: None where that is not the path (no copy, or
    /// a pass that tracks gradients).
    fn through_int8(&self, x: &Tensor, bias: Option<&Tensor>) -> Option<Result<Tensor>> {
        if let Some(y) = self.through_blocks8(x, bias) {
            return Some(y);
        }
        let q = self.int8.as_ref()?;
        if x.tracks_grad() || bias.is_some_and(Tensor::tracks_grad) {
            return None;
        }
        let (inp, out) = (q.k(), q.n());
        if x.rank() == 0 || x.last_dim() != inp {
            return Some(Err(Error::mismatch(
                "linear (x vs int8 weight (out, in))",
                x.shape(),
                &[out, inp],
            )));
        }
        let rows = x.numel() / inp.max(1);
        let mut y = vec![0.0f32; rows * out];
        q.matmul(&mut y, x.data(), bias.map(Tensor::data), rows);
        let mut shape = x.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = out;
        }
        Some(Tensor::new(y, &shape)) // (..., out)
    }

    /// One row through the f16 copy, as the f32 path computes it (the matrix-vector
    /// kernel, then the bias added): None where that path is not the one taken (several
    /// rows, no copy, weights under training, a level without AVX2).
    fn one_row_f16(&self, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Option<Result<Tensor>> {
        let half = self.half.as_ref()?;
        let [out, inp] = w.dims().ok()?;
        if x.rank() == 0
            || x.numel() != inp
            || half.len() != out * inp
            || w.tracks_grad()
            || bias.is_some_and(|b| b.tracks_grad() || b.shape() != [out])
            || !crate::ops::simd::has_avx2_fma()
        {
            return None;
        }
        let mut y = vec![0.0f32; out];
        crate::ops::matmul::gemv_t_f16(&mut y, x.data(), half, inp, out);
        if let Some(b) = bias {
            for (v, &b) in y.iter_mut().zip(b.data()) {
                *v += b;
            }
        }
        let mut shape = x.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = out;
        }
        Some(Tensor::new(y, &shape)) // (..., out)
    }

    /// The f32 weight tensor; errors for a quantised layer (use [`Weight::to_f32`]).
    pub fn weight_f32(&self) -> Result<&Tensor> {
        self.weight.as_f32().ok_or_else(|| {
            Error::Argument(format!(
                "this Linear {:?} holds quantised weights; dequantise them with weight.to_f32()",
                self.weight.shape()
            ))
        })
    }

    /// The input width.
    pub fn in_features(&self) -> usize {
        self.weight.shape().get(1).copied().unwrap_or(0)
    }

    /// The output width.
    pub fn out_features(&self) -> usize {
        self.weight.shape().first().copied().unwrap_or(0)
    }

    /// Apply the layer, with lucent's own [`Numerics`].
    ///
    /// # Shapes
    /// x: (..., in) → (..., out)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, Numerics::Lucent)
    }

    /// Apply the layer with `numerics` (which only quantised weights have a choice in:
    /// the orders of a product of several rows).
    ///
    /// # Shapes
    /// x: (..., in) → (..., out)
    pub fn forward_with(&self, x: &Tensor, numerics: Numerics) -> Result<Tensor> {
        match (&self.weight, &self.bias) {
            (Weight::F32(w), bias) => {
                let bias = bias.as_ref();
                if let Some(y) = self.through_int8(x, bias) {
                    return y;
                }
                if let Some(y) = self.through_bf16(x, bias) {
                    return y;
                }
                if self.round_inputs && !x.tracks_grad() && x.rank() > 0 && x.last_dim() > 0 {
                    let k = x.last_dim();
                    let mut q = vec![0i8; k.next_multiple_of(4)];
                    let mut xr = x.data().to_vec();
                    for row in xr.chunks_exact_mut(k) {
                        let s = crate::ops::linear_int8::quantize_row(row, &mut q);
                        for (v, &q) in row.iter_mut().zip(&q) {
                            *v = s * q as f32;
                        }
                    }
                    let xr = Tensor::new(xr, x.shape())?; // (..., in)
                    return linear_f32(&xr, w, self.packed.as_deref(), bias, numerics);
                }
                match self.one_row_f16(x, w, bias) {
                    Some(y) => y,
                    None => linear_f32(x, w, self.packed.as_deref(), bias, numerics),
                }
            }
            (w, bias) => {
                // A quantised W widened to int8 or bf16 (Linear::keep_int8): every
                // product, one row or many, through the copy.
                if let Some(y) = self.through_int8(x, bias.as_ref()) {
                    return y;
                }
                if let Some(y) = self.through_bf16(x, bias.as_ref()) {
                    return y;
                }
                match bias {
                    None => w.matmul_t(x, numerics),
                    Some(b) => w.matmul_t(x, numerics)?.add(b),
                }
            }
        }
    }

    /// `[x · W_mᵀ + b_m]` for several layers that read the same `x` (Q, K, V; gate, up).
    /// One decoded token through quantised weights without biases takes one shared pass
    /// ([`QMatrix::matvec_group`]), a prompt quantises its rows once for all of them
    /// ([`QMatrix::matmul_t_quantized_group`]); anything else runs layer by layer. Same
    /// results as [`Linear::forward_with`] on each.
    ///
    /// # Shapes
    /// x: (..., in) → [(..., out_m)]
    pub fn forward_group(
        layers: &[&Linear],
        x: &Tensor,
        numerics: Numerics,
    ) -> Result<Vec<Tensor>> {
        let mats: Option<Vec<&QMatrix>> = layers
            .iter()
            .map(|l| match (&l.weight, &l.bias) {
                (Weight::Quant { matrix, .. }, None)
                    if l.int8.is_none() && l.blocks8.is_none() && l.bf16.is_none() =>
                {
                    Some(matrix)
                }
                _ => None,
            })
            .collect();
        match mats {
            Some(mats)
                if !mats.is_empty()
                    && x.rank() > 0
                    && x.last_dim() > 0
                    && mats.iter().all(|m| m.cols() == x.last_dim()) =>
            {
                let t = x.numel() / x.last_dim();
                let ys = if t == 1 {
                    QMatrix::matvec_group(&mats, x.data())?
                } else {
                    // A prompt: its rows quantised once for all the matrices.
                    QMatrix::matmul_t_quantized_group(&mats, x.data(), t, numerics)?
                };
                ys.into_iter()
                    .zip(&mats)
                    .map(|(y, m)| {
                        let mut s = x.shape().to_vec();
                        *s.last_mut().unwrap_or(&mut 0) = m.rows();
                        Tensor::new(y, &s)
                    })
                    .collect()
            }
            _ => layers.iter().map(|l| l.forward_with(x, numerics)).collect(),
        }
    }

    /// The number of parameters (weights and bias).
    pub fn num_params(&self) -> usize {
        self.weight.numel() + self.bias.as_ref().map_or(0, Tensor::numel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    /// `a` and `b` give x the same output, shape and bits, on every ISA level (2 threads).
    fn same_bits_on_every_level(a: &Linear, b: &Linear, x: &Tensor) {
        for isa in crate::Isa::available() {
            let rt = crate::Runtime::builder()
                .threads(2)
                .isa(isa)
                .build()
                .unwrap();
            let (ya, yb) = rt.install(|| (a.forward(x).unwrap(), b.forward(x).unwrap()));
            assert_eq!(ya.shape(), yb.shape(), "{isa:?}");
            assert!(
                ya.data()
                    .iter()
                    .zip(yb.data())
                    .all(|(p, q)| p.to_bits() == q.to_bits()),
                "{isa:?}"
            );
        }
    }

    /// A layer whose weights are f16 values keeps the copy and gives, one row at a time,
    /// the same bits as without it, on every level; weights that are not f16 values are
    /// not copied.
    #[test]
    fn an_f16_copy_changes_no_bit() {
        let mut rng = StdRng::seed_from_u64(3);
        let (out, inp) = (37, 70);
        let w: Vec<f32> = Tensor::randn(&[out * inp], 0.5, &mut rng)
            .data()
            .iter()
            .map(|&x| half::f16::from_f32(x).to_f32())
            .collect();
        let b = Tensor::randn(&[out], 0.5, &mut rng);
        let plain = Linear::new(Tensor::new(w, &[out, inp]).unwrap(), Some(b)).unwrap();
        let mut copied = plain.clone();
        assert!(copied.keep_f16());
        let x = Tensor::randn(&[1, 1, inp], 1.0, &mut rng); // one row
        same_bits_on_every_level(&plain, &copied, &x);
        let mut not_f16 = Linear::new_random(inp, out, true, 0.5, &mut rng);
        assert!(!not_f16.keep_f16());
    }

    /// The packed copy gives several rows the same bits as W read in place, and once W
    /// is handed out to change (an optimiser's step through `visit_params`), products
    /// follow the new W, not the stale copy.
    #[test]
    fn a_packed_copy_changes_no_bit_and_goes_when_w_changes() {
        use crate::train::Parameters;
        let mut rng = StdRng::seed_from_u64(4);
        let (out, inp) = (37, 70);
        let plain = Linear::new_random(inp, out, true, 0.5, &mut rng);
        let mut packed = plain.clone();
        packed.keep_packed();
        let x = Tensor::randn(&[5, inp], 1.0, &mut rng); // several rows: the tiled kernel
        let same = |a: &Tensor, b: &Tensor| {
            a.shape() == b.shape()
                && a.data()
                    .iter()
                    .zip(b.data())
                    .all(|(p, q)| p.to_bits() == q.to_bits())
        };
        same_bits_on_every_level(&plain, &packed, &x);
        let mut changed = plain.clone();
        for l in [&mut packed, &mut changed] {
            l.visit_params("", &mut |_, t| {
                t.data_mut().iter_mut().for_each(|v| *v *= 2.0);
            });
        }
        let (want, got) = (changed.forward(&x).unwrap(), packed.forward(&x).unwrap());
        assert!(same(&want, &got));
        assert!(!same(&want, &plain.forward(&x).unwrap()));
    }
}
