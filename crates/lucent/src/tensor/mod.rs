//! The tensor: an n-dimensional array of f32 in row-major (C) order, like a numpy array
//! that is always contiguous.
//!
//! A `Tensor` is a shape plus shared storage. Storage is either owned (`Vec<f32>`) or a
//! window into a memory-mapped file (weights are never copied whole when they need not
//! be). Cloning is cheap (the storage is reference-counted); [`Tensor::reshape`] is cheap
//! (it shares the storage); every op that changes the layout ([`Tensor::transpose`],
//! [`Tensor::permute`], [`Tensor::narrow`], [`Tensor::cat`]) makes an explicit copy, so a
//! reader never has to think about strides.
//!
//! Files may store f16 or bf16 ([`Dtype`]); they widen to f32 when read
//! ([`Tensor::from_bytes`]).

mod backward;
pub mod quant;
pub mod tape;

use std::fmt;
use std::sync::Arc;

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::{Error, Result};

/// The element type of stored data. Compute is always f32; f16 and bf16 widen on read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16 (the top 16 bits of an f32).
    BF16,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::BF16 => "bf16",
        })
    }
}

/// Where a tensor's numbers live.
#[derive(Clone)]
enum Storage {
    /// Owned by the tensor (shared between clones until one writes).
    Owned(Arc<Vec<f32>>),
    /// A 4-byte-aligned window of a memory-mapped file: `len` f32 values from byte `start`.
    Mapped {
        map: Arc<memmap2::Mmap>,
        start: usize,
        len: usize,
    },
}

/// An n-dimensional f32 array, row-major and contiguous.
#[derive(Clone)]
pub struct Tensor {
    shape: Vec<usize>,
    storage: Storage,
    /// The autograd node that made this tensor, or marks it as a parameter that wants a
    /// gradient ([`tape`]). `None` for every tensor of an inference run.
    grad_node: Option<Arc<tape::Node>>,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.data();
        let head: Vec<f32> = d.iter().take(8).copied().collect();
        write!(f, "Tensor{:?} {:?}", self.shape, head)?;
        if d.len() > 8 {
            write!(f, "…")?;
        }
        Ok(())
    }
}

/// The number of elements of `shape`, or an error if it overflows.
fn numel_of(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::Shape(format!("shape {shape:?} has too many elements")))
}

impl Tensor {
    // ---------------------------------------------------------------- construction

    /// A tensor of `shape` holding `data` (row-major). Errors if the lengths disagree.
    pub fn new(data: Vec<f32>, shape: &[usize]) -> Result<Tensor> {
        let n = numel_of(shape)?;
        if n != data.len() {
            return Err(Error::Shape(format!(
                "cannot make a tensor of shape {shape:?} ({n} elements) from {} values",
                data.len()
            )));
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Storage::Owned(Arc::new(data)),
            grad_node: None,
        })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: &[usize]) -> Tensor {
        Tensor::full(shape, 0.0)
    }

    /// A tensor filled with `value`.
    pub fn full(shape: &[usize], value: f32) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            shape: shape.to_vec(),
            storage: Storage::Owned(Arc::new(vec![value; n])),
            grad_node: None,
        }
    }

    /// A tensor whose element at flat (row-major) index `i` is `f(i)`.
    pub fn from_fn(shape: &[usize], f: impl FnMut(usize) -> f32) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            shape: shape.to_vec(),
            storage: Storage::Owned(Arc::new((0..n).map(f).collect())),
            grad_node: None,
        }
    }

    /// A 1-D tensor from a slice.
    pub fn from_slice(data: &[f32]) -> Tensor {
        Tensor {
            shape: vec![data.len()],
            storage: Storage::Owned(Arc::new(data.to_vec())),
            grad_node: None,
        }
    }

    /// A 2-D tensor from rows of equal length.
    pub fn from_rows(rows: &[Vec<f32>]) -> Result<Tensor> {
        let cols = rows.first().map_or(0, |r| r.len());
        if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != cols) {
            return Err(Error::Shape(format!(
                "row {i} has {} values, row 0 has {cols}",
                r.len()
            )));
        }
        Tensor::new(rows.concat(), &[rows.len(), cols])
    }

    /// Samples from N(0, std²), drawn with `rng` (seeded by the caller).
    pub fn randn(shape: &[usize], std: f32, rng: &mut impl Rng) -> Tensor {
        Tensor::from_fn(shape, |_| {
            let z: f32 = StandardNormal.sample(rng);
            z * std
        })
    }

    /// Samples from U(lo, hi), drawn with `rng`.
    pub fn rand_uniform(shape: &[usize], lo: f32, hi: f32, rng: &mut impl Rng) -> Tensor {
        Tensor::from_fn(shape, |_| rng.random_range(lo..hi))
    }

    /// A tensor read from little-endian bytes of `dtype`, widened to f32 (copies).
    pub fn from_bytes(bytes: &[u8], dtype: Dtype, shape: &[usize]) -> Result<Tensor> {
        let n = numel_of(shape)?;
        if bytes.len() != n * dtype.size() {
            return Err(Error::Shape(format!(
                "{} bytes of {dtype} cannot fill shape {shape:?} ({n} elements)",
                bytes.len()
            )));
        }
        let data: Vec<f32> = match dtype {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        };
        Tensor::new(data, shape)
    }

    /// A tensor over f32 data inside a memory map, without copying when the data is
    /// 4-byte aligned (it is copied otherwise). `start` is a byte offset into `map`.
    pub fn from_mmap_f32(map: Arc<memmap2::Mmap>, start: usize, shape: &[usize]) -> Result<Tensor> {
        let n = numel_of(shape)?;
        let end = n
            .checked_mul(4)
            .and_then(|b| b.checked_add(start))
            .ok_or_else(|| Error::Shape(format!("shape {shape:?} is too large")))?;
        if end > map.len() {
            return Err(Error::Shape(format!(
                "tensor of shape {shape:?} at byte {start} runs past the end of the file ({} bytes)",
                map.len()
            )));
        }
        let ptr = map[start..].as_ptr();
        if !(ptr as usize).is_multiple_of(std::mem::align_of::<f32>())
            || cfg!(target_endian = "big")
        {
            return Tensor::from_bytes(&map[start..end], Dtype::F32, shape);
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Storage::Mapped { map, start, len: n },
            grad_node: None,
        })
    }

    // ---------------------------------------------------------------- shape

    /// The shape, outermost dimension first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The shape as a fixed-size array, so callers can name each dimension:
    /// `let [b, t, d] = x.dims()?;`. Errors if the rank is not `N`.
    pub fn dims<const N: usize>(&self) -> Result<[usize; N]> {
        self.shape.as_slice().try_into().map_err(|_| {
            Error::Shape(format!(
                "expected a tensor of rank {N}, got shape {:?}",
                self.shape
            ))
        })
    }

    /// The size of the last dimension (1 for a scalar).
    pub fn last_dim(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// The same data under a new shape with the same number of elements (no copy).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if numel_of(shape)? != self.numel() {
            return Err(Error::Shape(format!(
                "cannot reshape {:?} ({} elements) to {shape:?}",
                self.shape,
                self.numel()
            )));
        }
        let out = Tensor {
            shape: shape.to_vec(),
            storage: self.storage.clone(),
            grad_node: None,
        };
        Ok(backward::record_reshape(out, self))
    }

    // ---------------------------------------------------------------- data

    /// The elements, row-major.
    pub fn data(&self) -> &[f32] {
        match &self.storage {
            Storage::Owned(v) => v,
            Storage::Mapped { map, start, len } => {
                let bytes = &map[*start..*start + *len * 4];
                // Alignment was checked in `from_mmap_f32`.
                bytemuck::cast_slice(bytes)
            }
        }
    }

    /// The elements, writable. Copies first if the storage is shared or mapped.
    pub fn data_mut(&mut self) -> &mut [f32] {
        if let Storage::Mapped { .. } = self.storage {
            self.storage = Storage::Owned(Arc::new(self.data().to_vec()));
        }
        match &mut self.storage {
            Storage::Owned(v) => Arc::make_mut(v).as_mut_slice(),
            Storage::Mapped { .. } => unreachable!("mapped storage was just copied"),
        }
    }

    /// The elements as an owned vector (no copy when this tensor holds the only reference).
    pub fn into_vec(self) -> Vec<f32> {
        match self.storage {
            Storage::Owned(v) => Arc::try_unwrap(v).unwrap_or_else(|v| (*v).clone()),
            Storage::Mapped { .. } => self.data().to_vec(),
        }
    }

    /// Whether the data lives in a memory-mapped file (not copied into memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped { .. })
    }

    /// The single element of a one-element tensor.
    pub fn item(&self) -> Result<f32> {
        match self.data() {
            [x] => Ok(*x),
            d => Err(Error::Shape(format!(
                "item() needs one element, tensor {:?} has {}",
                self.shape,
                d.len()
            ))),
        }
    }

    /// Row `i` of the tensor seen as a matrix (rows × last dim).
    pub fn row(&self, i: usize) -> &[f32] {
        let d = self.last_dim();
        &self.data()[i * d..(i + 1) * d]
    }

    /// The tensor as nested rows (rows × last dim), for printing and tests.
    pub fn to_rows(&self) -> Vec<Vec<f32>> {
        let d = self.last_dim().max(1);
        self.data().chunks(d).map(|c| c.to_vec()).collect()
    }

    // ---------------------------------------------------------------- layout copies

    /// Swap dimensions `a` and `b`, copying into the new layout.
    pub fn transpose(&self, a: usize, b: usize) -> Result<Tensor> {
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        if a >= perm.len() || b >= perm.len() {
            return Err(Error::Shape(format!(
                "transpose({a}, {b}) on a tensor of rank {} (shape {:?})",
                self.rank(),
                self.shape
            )));
        }
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Reorder the dimensions: output dimension `i` is input dimension `perm[i]` (as
    /// numpy's `transpose(perm)`), copying into the new layout.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let r = self.rank();
        let mut seen = vec![false; r];
        if perm.len() != r
            || perm
                .iter()
                .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::Shape(format!(
                "permute({perm:?}) is not a permutation of the {r} dimensions of {:?}",
                self.shape
            )));
        }
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(self.clone());
        }
        let out = self.permute_copy(perm)?;
        Ok(backward::record_permute(out, self, perm))
    }

    /// The copy behind [`Tensor::permute`] (a valid, non-identity `perm`).
    fn permute_copy(&self, perm: &[usize]) -> Result<Tensor> {
        let r = self.rank();
        let out_shape: Vec<usize> = perm.iter().map(|&p| self.shape[p]).collect();
        let in_strides = strides(&self.shape);
        let src_strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
        let src = self.data();
        let mut out = Vec::with_capacity(self.numel());
        // Walk the output in order; the innermost dimension is copied in a tight loop.
        let inner = *out_shape.last().unwrap_or(&1);
        let inner_stride = *src_strides.last().unwrap_or(&1);
        let outer_shape = &out_shape[..r.saturating_sub(1)];
        let outer_count: usize = outer_shape.iter().product();
        if inner > 0 {
            for o in 0..outer_count {
                // Unravel the outer index, innermost first, into a source offset.
                let (mut rest, mut base) = (o, 0);
                for (k, &len) in outer_shape.iter().enumerate().rev() {
                    base += (rest % len) * src_strides[k];
                    rest /= len;
                }
                if inner_stride == 1 {
                    out.extend_from_slice(&src[base..base + inner]); // contiguous run
                } else {
                    out.extend((0..inner).map(|j| src[base + j * inner_stride]));
                }
            }
        }
        Tensor::new(out, &out_shape)
    }

    /// `len` entries of dimension `dim` starting at `start`, copied.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        if dim >= self.rank() || start + len > self.shape[dim] {
            return Err(Error::Shape(format!(
                "narrow(dim {dim}, start {start}, len {len}) out of range for shape {:?}",
                self.shape
            )));
        }
        let outer: usize = self.shape[..dim].iter().product();
        let inner: usize = self.shape[dim + 1..].iter().product();
        let d = self.shape[dim];
        let src = self.data();
        let mut out = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            let base = (o * d + start) * inner;
            out.extend_from_slice(&src[base..base + len * inner]);
        }
        let mut shape = self.shape.clone();
        shape[dim] = len;
        let out = Tensor::new(out, &shape)?;
        Ok(backward::record_narrow(out, self, dim, start))
    }

    /// Join tensors along dimension `dim`; all other dimensions must agree.
    pub fn cat(tensors: &[&Tensor], dim: usize) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::Shape("cat of no tensors".into()))?;
        if dim >= first.rank() {
            return Err(Error::Shape(format!(
                "cat along dim {dim} of tensors of rank {}",
                first.rank()
            )));
        }
        for t in tensors {
            let same = t.rank() == first.rank()
                && t.shape
                    .iter()
                    .zip(&first.shape)
                    .enumerate()
                    .all(|(i, (a, b))| i == dim || a == b);
            if !same {
                return Err(Error::mismatch(
                    format!("cat(dim {dim})"),
                    &first.shape,
                    &t.shape,
                ));
            }
        }
        let outer: usize = first.shape[..dim].iter().product();
        let inner: usize = first.shape[dim + 1..].iter().product();
        let total: usize = tensors.iter().map(|t| t.shape[dim]).sum();
        let mut out = Vec::with_capacity(outer * total * inner);
        for o in 0..outer {
            for t in tensors {
                let chunk = t.shape[dim] * inner;
                out.extend_from_slice(&t.data()[o * chunk..(o + 1) * chunk]);
            }
        }
        let mut shape = first.shape.clone();
        shape[dim] = total;
        let out = Tensor::new(out, &shape)?;
        Ok(backward::record_cat(out, tensors, dim))
    }

    /// Rows of a matrix picked by index (an embedding lookup): `self` is (n, d), the
    /// result is (ids.len(), d). Errors name the bad index.
    pub fn select_rows(&self, ids: &[usize]) -> Result<Tensor> {
        let [n, d] = self.dims()?;
        let src = self.data();
        let mut out = Vec::with_capacity(ids.len() * d);
        for &i in ids {
            if i >= n {
                return Err(Error::Argument(format!(
                    "index {i} is out of range for a table of {n} rows"
                )));
            }
            out.extend_from_slice(&src[i * d..(i + 1) * d]);
        }
        let out = Tensor::new(out, &[ids.len(), d])?;
        Ok(backward::record_select_rows(out, self, ids))
    }

    // ---------------------------------------------------------------- elementwise

    /// Apply `f` to every element.
    pub fn map(&self, f: impl Fn(f32) -> f32) -> Tensor {
        Tensor {
            shape: self.shape.clone(),
            storage: Storage::Owned(Arc::new(self.data().iter().map(|&x| f(x)).collect())),
            grad_node: None,
        }
    }

    /// Combine with `rhs` elementwise. `rhs` must have the same shape or a suffix of it
    /// (e.g. a bias of shape (d) added to every row of (b, t, d)): numpy broadcasting
    /// over leading dimensions.
    pub fn zip_with(&self, rhs: &Tensor, op: &str, f: impl Fn(f32, f32) -> f32) -> Result<Tensor> {
        let r = rhs.rank();
        if r > self.rank() || self.shape[self.rank() - r..] != rhs.shape[..] {
            return Err(Error::mismatch(op, &self.shape, &rhs.shape));
        }
        let b = rhs.data();
        let mut out: Vec<f32> = Vec::with_capacity(self.numel());
        if !b.is_empty() {
            // One rhs-sized chunk at a time: slice zips the compiler vectorises.
            for a in self.data().chunks_exact(b.len()) {
                out.extend(a.iter().zip(b).map(|(&x, &y)| f(x, y)));
            }
        }
        Tensor::new(out, &self.shape)
    }

    /// Elementwise sum (rhs broadcast over leading dimensions).
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        let out = self.zip_with(rhs, "add", |a, b| a + b)?;
        Ok(backward::record_add(out, self, rhs))
    }

    /// Elementwise difference (rhs broadcast over leading dimensions).
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        let out = self.zip_with(rhs, "sub", |a, b| a - b)?;
        Ok(backward::record_sub(out, self, rhs))
    }

    /// Elementwise product (rhs broadcast over leading dimensions).
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        let out = self.zip_with(rhs, "mul", |a, b| a * b)?;
        Ok(backward::record_mul(out, self, rhs))
    }

    /// Multiply every element by `s`.
    pub fn scale(&self, s: f32) -> Tensor {
        backward::record_scale(self.map(|x| x * s), self, s)
    }

    /// In place: `self += rhs` (same shape), e.g. a residual connection.
    pub fn add_assign(&mut self, rhs: &Tensor) -> Result<()> {
        if self.shape != rhs.shape {
            return Err(Error::mismatch("add_assign", &self.shape, &rhs.shape));
        }
        let b = rhs.data().to_vec();
        for (a, b) in self.data_mut().iter_mut().zip(b) {
            *a += b;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- autograd

    /// The autograd node of this tensor, if it was recorded or is a parameter.
    pub(crate) fn grad_node(&self) -> Option<&Arc<tape::Node>> {
        self.grad_node.as_ref()
    }

    /// The same tensor carrying `node` (or none).
    pub(crate) fn with_grad_node(mut self, node: Option<Arc<tape::Node>>) -> Tensor {
        self.grad_node = node;
        self
    }

    // ---------------------------------------------------------------- comparisons

    /// The largest |self − other| over all elements (errors if shapes differ).
    pub fn max_abs_diff(&self, other: &Tensor) -> Result<f32> {
        if self.shape != other.shape {
            return Err(Error::mismatch("max_abs_diff", &self.shape, &other.shape));
        }
        Ok(self
            .data()
            .iter()
            .zip(other.data())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max))
    }

    /// The index of the largest element of each row (last dimension; the first of equal
    /// ones: [`crate::ops::softmax::argmax`]).
    pub fn argmax_rows(&self) -> Vec<usize> {
        let d = self.last_dim().max(1);
        self.data()
            .chunks(d)
            .map(crate::ops::softmax::argmax)
            .collect()
    }
}

/// Row-major strides (in elements) of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn permute_matches_index_formula() -> TestResult {
        let t = Tensor::from_fn(&[2, 3, 4], |i| i as f32);
        let p = t.permute(&[2, 0, 1])?;
        assert_eq!(p.shape(), &[4, 2, 3]);
        for a in 0..4 {
            for b in 0..2 {
                for c in 0..3 {
                    let got = p.data()[(a * 2 + b) * 3 + c];
                    let want = t.data()[(b * 3 + c) * 4 + a];
                    assert_eq!(got, want);
                }
            }
        }
        let back = p.permute(&[1, 2, 0])?;
        assert_eq!(back.data(), t.data());
        Ok(())
    }

    #[test]
    fn permute_with_unit_dims_matches_index_formula() -> TestResult {
        // Shapes with length-1 dimensions (a decode step's (b, 1, h, d)) and every
        // permutation of rank 4, against the index formula.
        let perms4: Vec<[usize; 4]> = {
            let mut v = Vec::new();
            for a in 0..4 {
                for b in 0..4 {
                    for c in 0..4 {
                        for d in 0..4 {
                            let p = [a, b, c, d];
                            let mut seen = [false; 4];
                            if p.iter().all(|&i| !std::mem::replace(&mut seen[i], true)) {
                                v.push(p);
                            }
                        }
                    }
                }
            }
            v
        };
        for shape in [
            [1, 1, 9, 64],
            [2, 1, 3, 5],
            [1, 7, 1, 4],
            [3, 2, 1, 1],
            [1, 1, 1, 1],
        ] {
            let t = Tensor::from_fn(&shape, |i| i as f32);
            let st = strides(&shape);
            for p in &perms4 {
                let out = t.permute(p)?;
                let os: Vec<usize> = p.iter().map(|&i| shape[i]).collect();
                assert_eq!(out.shape(), os.as_slice());
                let ost = strides(&os);
                for (flat, &v) in out.data().iter().enumerate() {
                    let mut src = 0;
                    for k in 0..4 {
                        let idx = (flat / ost[k]) % os[k];
                        src += idx * st[p[k]];
                    }
                    assert_eq!(v, src as f32, "shape {shape:?} perm {p:?} at {flat}");
                }
            }
        }
        Ok(())
    }

    #[test]
    fn transpose_of_rank_one_and_length_one() -> TestResult {
        let t = Tensor::from_fn(&[1, 5], |i| i as f32);
        let tt = t.transpose(0, 1)?;
        assert_eq!(tt.shape(), &[5, 1]);
        assert_eq!(tt.data(), t.data());
        let v = Tensor::from_slice(&[1.0, 2.0]);
        assert_eq!(v.permute(&[0])?.data(), &[1.0, 2.0]);
        assert!(v.transpose(0, 1).is_err());
        Ok(())
    }

    #[test]
    fn narrow_and_cat_round_trip() -> TestResult {
        let t = Tensor::from_fn(&[2, 5, 3], |i| i as f32);
        let a = t.narrow(1, 0, 2)?;
        let b = t.narrow(1, 2, 3)?;
        let c = Tensor::cat(&[&a, &b], 1)?;
        assert_eq!(c.data(), t.data());
        assert!(t.narrow(1, 4, 2).is_err());
        Ok(())
    }

    #[test]
    fn broadcast_add_and_errors_name_shapes() -> TestResult {
        let x = Tensor::zeros(&[2, 3]);
        let b = Tensor::from_slice(&[1.0, 2.0, 3.0]);
        assert_eq!(x.add(&b)?.data(), &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        let err = x.add(&Tensor::zeros(&[2])).unwrap_err().to_string();
        assert!(err.contains("[2, 3]") && err.contains("[2]"), "{err}");
        Ok(())
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(Tensor::new(vec![1.0; 5], &[2, 3]).is_err());
        assert!(Tensor::zeros(&[6]).reshape(&[4, 2]).is_err());
        assert!(Tensor::zeros(&[2, 3]).dims::<3>().is_err());
        assert!(Tensor::zeros(&[3, 2]).select_rows(&[3]).is_err());
    }

    #[test]
    fn half_widening() -> TestResult {
        let v = [1.5f32, -2.25, 0.0];
        let f16: Vec<u8> = v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        let bf: Vec<u8> = v
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        assert_eq!(Tensor::from_bytes(&f16, Dtype::F16, &[3])?.data(), &v);
        assert_eq!(Tensor::from_bytes(&bf, Dtype::BF16, &[3])?.data(), &v);
        Ok(())
    }
}
