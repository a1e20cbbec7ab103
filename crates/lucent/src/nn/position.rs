//! Positional information: how a Transformer knows where each token sits.
//!
//! Attention by itself is blind to order (permute the tokens and each output row is
//! permuted the same way), so position is put in by one of four schemes:
//!
//! | scheme | where | formula |
//! | --- | --- | --- |
//! | [`SinusoidalEncoding`] | added to the embeddings (Vaswani et al. 2017, §3.5) | PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) |
//! | [`LearnedPositions`] | added to the embeddings (BERT, GPT-2) | a trained table P, row pos added to token pos |
//! | [`Rope`] | rotates queries and keys (Su et al. 2021, RoFormer) | pair i at position p turned by p·θᵢ, θᵢ = base^(−2i/d) |
//! | [`Alibi`] | a bias on the attention scores (Press et al. 2022, "Train Short, Test Long") | score(i, j) − mₕ·(i − j), one slope mₕ per head |
//!
//! The sinusoidal table is computed in f64 and stored in f32; [`sinusoidal_value`] is the
//! formula itself, in f64, for tests and for showing the arithmetic.

use rand::Rng;

use crate::ops::{rope, RopeConvention};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The base of the sinusoidal wavelengths (the paper's 10000).
pub const SINUSOIDAL_BASE: f64 = 10000.0;

/// One entry of the sinusoidal table, in f64:
/// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
///
/// `j` is the feature index (2i or 2i + 1); `d` the model width. An odd `d` is allowed:
/// its last feature is a sine with no cosine partner.
pub fn sinusoidal_value(pos: usize, j: usize, d: usize) -> f64 {
    let two_i = (j - j % 2) as f64;
    let angle = pos as f64 / SINUSOIDAL_BASE.powf(two_i / d as f64);
    if j.is_multiple_of(2) {
        angle.sin()
    } else {
        angle.cos()
    }
}

/// The fixed sinusoidal position encoding of "Attention Is All You Need" (§3.5).
///
/// PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
///
/// Each pair of features is a clock of its own wavelength, from 2π (i = 0) to 10000·2π,
/// so PE(pos + k) is a fixed rotation of PE(pos) and nearby positions have similar codes.
#[derive(Clone, Debug)]
pub struct SinusoidalEncoding {
    /// (max_len, d)
    table: Tensor,
}

impl SinusoidalEncoding {
    /// The table for positions 0..max_len and width d (computed in f64, stored in f32).
    pub fn new(max_len: usize, d: usize) -> Result<Self> {
        if max_len == 0 || d == 0 {
            return Err(Error::Argument(format!(
                "sinusoidal encoding needs max_len > 0 and d > 0, got max_len={max_len}, d={d}"
            )));
        }
        let table = Tensor::new(
            Self::table_f64(max_len, d)
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            &[max_len, d],
        )?; // (max_len, d)
        Ok(SinusoidalEncoding { table })
    }

    /// The same table in f64, row-major (max_len · d values): the formula, entry by entry.
    pub fn table_f64(max_len: usize, d: usize) -> Vec<f64> {
        (0..max_len)
            .flat_map(|pos| (0..d).map(move |j| sinusoidal_value(pos, j, d)))
            .collect()
    }

    /// The whole table.
    ///
    /// # Shapes
    /// → (max_len, d)
    pub fn table(&self) -> &Tensor {
        &self.table
    }

    /// How many positions the table holds.
    pub fn max_len(&self) -> usize {
        self.table.shape()[0]
    }

    /// The model width d.
    pub fn dim(&self) -> usize {
        self.table.shape()[1]
    }

    /// Rows `offset .. offset + t` of the table.
    ///
    /// # Shapes
    /// → (t, d)
    pub fn positions(&self, offset: usize, t: usize) -> Result<Tensor> {
        check_range("sinusoidal encoding", offset, t, self.max_len())?;
        self.table.narrow(0, offset, t)
    }

    /// x + PE: add the encodings of positions `offset .. offset + t` to each sequence.
    ///
    /// # Shapes
    /// x: (b, t, d) → (b, t, d)
    pub fn forward(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        add_positions("sinusoidal encoding", x, &self.table, offset)
    }
}

/// Learned absolute positions (BERT, GPT-2): a trained table P of (max_len, d), row pos
/// added to the embedding of the token at pos. It knows nothing past max_len.
#[derive(Clone, Debug)]
pub struct LearnedPositions {
    /// (max_len, d)
    table: Tensor,
}

impl LearnedPositions {
    /// Wrap a trained table of shape (max_len, d).
    pub fn new(table: Tensor) -> Result<Self> {
        let [max_len, d] = table.dims()?;
        if max_len == 0 || d == 0 {
            return Err(Error::Shape(format!(
                "learned position table must be (max_len, d) with both > 0, got {:?}",
                table.shape()
            )));
        }
        Ok(LearnedPositions { table })
    }

    /// A fresh table drawn from N(0, std²) (GPT-2 uses std = 0.02), for training.
    pub fn randn(max_len: usize, d: usize, std: f32, rng: &mut impl Rng) -> Result<Self> {
        Self::new(Tensor::randn(&[max_len, d], std, rng))
    }

    /// The table.
    ///
    /// # Shapes
    /// → (max_len, d)
    pub fn table(&self) -> &Tensor {
        &self.table
    }

    /// The table, writable (for training: optimisers update it in place).
    pub fn table_mut(&mut self) -> &mut Tensor {
        &mut self.table
    }

    /// How many positions the table holds.
    pub fn max_len(&self) -> usize {
        self.table.shape()[0]
    }

    /// Rows `offset .. offset + t`; an error past max_len.
    ///
    /// # Shapes
    /// → (t, d)
    pub fn positions(&self, offset: usize, t: usize) -> Result<Tensor> {
        check_range("learned positions", offset, t, self.max_len())?;
        self.table.narrow(0, offset, t)
    }

    /// x + P[offset .. offset + t]; an error past max_len.
    ///
    /// # Shapes
    /// x: (b, t, d) → (b, t, d)
    pub fn forward(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        add_positions("learned positions", x, &self.table, offset)
    }
}

/// Absolute positions added to the token embeddings before the first layer: the
/// paper's fixed sinusoids or a learned table (RoPE and ALiBi act inside attention
/// instead).
#[derive(Clone, Debug)]
pub enum AbsolutePositions {
    /// sin/cos of position × frequency (no parameters).
    Sinusoidal(SinusoidalEncoding),
    /// A trained table.
    Learned(LearnedPositions),
}

impl AbsolutePositions {
    /// How many positions it covers.
    pub fn max_len(&self) -> usize {
        match self {
            AbsolutePositions::Sinusoidal(s) => s.max_len(),
            AbsolutePositions::Learned(l) => l.max_len(),
        }
    }

    /// x + P[offset .. offset + t]; an error past max_len.
    ///
    /// # Shapes
    /// x: (b, t, d) → (b, t, d)
    pub fn forward(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        match self {
            AbsolutePositions::Sinusoidal(s) => s.forward(x, offset),
            AbsolutePositions::Learned(l) => l.forward(x, offset),
        }
    }
}

fn check_range(what: &str, offset: usize, t: usize, max_len: usize) -> Result<()> {
    if offset + t > max_len {
        return Err(Error::Argument(format!(
            "{what}: positions {offset}..{} asked for, but the table holds only {max_len} \
             (shorten the input to at most {max_len} tokens)",
            offset + t
        )));
    }
    Ok(())
}

fn add_positions(what: &str, x: &Tensor, table: &Tensor, offset: usize) -> Result<Tensor> {
    let [_b, t, d] = x.dims()?;
    if d != table.shape()[1] {
        return Err(Error::mismatch(
            format!("{what} (x + PE)"),
            x.shape(),
            table.shape(),
        ));
    }
    check_range(what, offset, t, table.shape()[0])?;
    let pe = table.narrow(0, offset, t)?; // (t, d)
    x.add(&pe) // (b, t, d) + (t, d) broadcast over b
}

/// Rotary position embedding (RoFormer): rotates each query and key so that q·k depends
/// only on the distance between their positions.
///
/// (x₁, x₂) ↦ (x₁ cos pθᵢ − x₂ sin pθᵢ,  x₁ sin pθᵢ + x₂ cos pθᵢ),  θᵢ = base^(−2i/d)
///
/// A thin holder of the settings over [`crate::ops::rope`], which does the arithmetic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    /// The base of the wavelengths (10000 in the paper, 500000 in LLaMA 3, ...).
    pub base: f32,
    /// Features per head d (even).
    pub head_dim: usize,
    /// Which features are rotated together.
    pub convention: RopeConvention,
}

impl Rope {
    /// RoPE for heads of `head_dim` features (must be even).
    pub fn new(head_dim: usize, base: f32, convention: RopeConvention) -> Result<Self> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::Config(format!(
                "RoPE needs an even head dimension > 0, got {head_dim}"
            )));
        }
        if base.is_nan() || base <= 1.0 || !base.is_finite() {
            return Err(Error::Config(format!(
                "RoPE base must be a finite number > 1, got {base}"
            )));
        }
        Ok(Rope {
            base,
            head_dim,
            convention,
        })
    }

    /// θᵢ = base^(−2i/d), the angle per position of pair i.
    pub fn inv_freq(&self, i: usize) -> f64 {
        crate::ops::rope::reference::inv_freq(i, self.head_dim, self.base)
    }

    /// Rotate queries or keys at positions `offset .. offset + t` (offset = tokens
    /// already in the KV cache).
    ///
    /// # Shapes
    /// x: (b, h, t, d) with d = head_dim → (b, h, t, d)
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let [_b, _h, t, d] = x.dims()?;
        if d != self.head_dim {
            return Err(Error::Shape(format!(
                "RoPE set up for head dimension {} but x has shape {:?} (b, h, t, d)",
                self.head_dim,
                x.shape()
            )));
        }
        let positions: Vec<usize> = (offset..offset + t).collect();
        rope(x, &positions, self.base, self.convention)
    }
}

/// Which distance ALiBi penalises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlibiForm {
    /// Decoders: bias(i, j) = −m·(i − j) for keys j ≤ i. Keys after the query get 0:
    /// the causal mask (`AttentionParams::causal`) hides them anyway.
    Causal,
    /// Encoders (bidirectional): bias(i, j) = −m·|i − j|.
    Symmetric,
}

/// ALiBi, attention with linear biases (Press et al. 2022): no position vectors at all,
/// but each head h adds −mₕ·distance to its scores, so far keys count less.
///
/// Slopes: for n heads, n a power of two, mₖ = 2^(−8k/n), k = 1..n (a geometric
/// sequence starting at and with ratio 2^(−8/n)). For other n, take the largest power of
/// two p < n: its p slopes, then the first n − p of every other slope of the 2p sequence
/// (k = 1, 3, 5, ... of 2^(−8k/2p) = 2^(−4k/p)), as in the authors' reference code.
#[derive(Clone, Debug)]
pub struct Alibi {
    slopes: Vec<f32>,
}

impl Alibi {
    /// The slopes for `n_heads` heads.
    pub fn new(n_heads: usize) -> Result<Self> {
        if n_heads == 0 {
            return Err(Error::Config("ALiBi needs at least one head".into()));
        }
        Ok(Alibi {
            slopes: Self::slopes_f64(n_heads)
                .into_iter()
                .map(|s| s as f32)
                .collect(),
        })
    }

    /// The slope rule, in f64 (see the type's doc).
    pub fn slopes_f64(n_heads: usize) -> Vec<f64> {
        fn power_of_two(n: usize) -> Vec<f64> {
            (1..=n)
                .map(|k| 2f64.powf(-8.0 * k as f64 / n as f64))
                .collect()
        }
        if n_heads == 0 {
            return Vec::new();
        }
        if n_heads.is_power_of_two() {
            return power_of_two(n_heads);
        }
        let p = 1usize << (usize::BITS - 1 - n_heads.leading_zeros()); // largest power of two < n
        let mut s = power_of_two(p);
        s.extend(power_of_two(2 * p).into_iter().step_by(2).take(n_heads - p));
        s
    }

    /// One slope per head.
    pub fn slopes(&self) -> &[f32] {
        &self.slopes
    }

    /// Number of heads.
    pub fn n_heads(&self) -> usize {
        self.slopes.len()
    }

    /// The additive bias for `t_q` queries over `t_k` keys. With a KV cache the queries
    /// are the last t_q positions: query i sits at position t_k − t_q + i.
    ///
    /// # Shapes
    /// → (1, h, t_q, t_k), ready for `AttentionParams::bias`
    pub fn bias(&self, t_q: usize, t_k: usize, form: AlibiForm) -> Result<Tensor> {
        if t_q > t_k {
            return Err(Error::Shape(format!(
                "ALiBi bias for {t_q} queries over only {t_k} keys (queries must be the last keys)"
            )));
        }
        let h = self.n_heads();
        let mut data = Vec::with_capacity(h * t_q * t_k);
        for &m in &self.slopes {
            for i in 0..t_q {
                let pos = (t_k - t_q + i) as f32;
                for j in 0..t_k {
                    let dist = pos - j as f32;
                    data.push(match form {
                        AlibiForm::Causal if dist < 0.0 => 0.0,
                        AlibiForm::Causal => -m * dist,
                        AlibiForm::Symmetric => -m * dist.abs(),
                    });
                }
            }
        }
        Tensor::new(data, &[1, h, t_q, t_k]) // (1, h, t_q, t_k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn sinusoidal_first_row_is_sin0_cos0() -> TestResult {
        let pe = SinusoidalEncoding::new(4, 6)?;
        assert_eq!(pe.table().row(0), &[0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
        // odd width: the last feature is a sine
        let odd = SinusoidalEncoding::new(3, 5)?;
        assert_eq!(
            odd.table().row(1)[4] as f64,
            (1.0f64 / 10000f64.powf(4.0 / 5.0)).sin() as f32 as f64
        );
        Ok(())
    }

    #[test]
    fn sinusoidal_forward_adds_with_offset() -> TestResult {
        let pe = SinusoidalEncoding::new(10, 4)?;
        let x = Tensor::from_fn(&[2, 3, 4], |i| i as f32);
        let y = pe.forward(&x, 5)?;
        for b in 0..2 {
            for t in 0..3 {
                for j in 0..4 {
                    let idx = (b * 3 + t) * 4 + j;
                    let want = idx as f32 + pe.table().row(5 + t)[j];
                    assert_eq!(y.data()[idx], want);
                }
            }
        }
        assert!(pe.forward(&x, 8).is_err(), "8 + 3 > 10 positions");
        assert!(
            pe.forward(&Tensor::zeros(&[1, 2, 3]), 0).is_err(),
            "width 3 vs 4"
        );
        assert!(SinusoidalEncoding::new(0, 4).is_err());
        Ok(())
    }

    #[test]
    fn learned_positions_error_past_max_len() -> TestResult {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let lp = LearnedPositions::randn(4, 3, 0.02, &mut rng)?;
        let x = Tensor::zeros(&[1, 4, 3]);
        let y = lp.forward(&x, 0)?;
        assert_eq!(y.data(), lp.table().data());
        let e = lp.forward(&x, 1).unwrap_err().to_string();
        assert!(e.contains("only 4"), "{e}");
        assert!(LearnedPositions::new(Tensor::zeros(&[0, 3])).is_err());
        Ok(())
    }

    #[test]
    fn rope_offset_equals_positions_and_keeps_norm() -> TestResult {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let r = Rope::new(6, 10000.0, RopeConvention::RotateHalf)?;
        let x = Tensor::randn(&[1, 2, 3, 6], 1.0, &mut rng);
        let y = r.apply(&x, 7)?;
        let z = rope(&x, &[7, 8, 9], 10000.0, RopeConvention::RotateHalf)?;
        assert_eq!(y.data(), z.data());
        // a rotation keeps each row's length
        for (a, b) in x.data().chunks(6).zip(y.data().chunks(6)) {
            let na: f32 = a.iter().map(|v| v * v).sum();
            let nb: f32 = b.iter().map(|v| v * v).sum();
            assert!((na - nb).abs() < 1e-5);
        }
        assert!(Rope::new(5, 10000.0, RopeConvention::Interleaved).is_err());
        assert!(r.apply(&Tensor::zeros(&[1, 1, 2, 4]), 0).is_err());
        Ok(())
    }

    #[test]
    fn alibi_power_of_two_and_bias_forms() -> TestResult {
        let a = Alibi::new(4)?;
        assert_eq!(a.slopes(), &[0.25, 0.0625, 0.015625, 0.00390625]);
        let b = a.bias(3, 3, AlibiForm::Causal)?;
        assert_eq!(b.shape(), &[1, 4, 3, 3]);
        // head 0, slope 1/4: row 2 = [-0.5, -0.25, 0]
        assert_eq!(&b.data()[6..9], &[-0.5, -0.25, 0.0]);
        assert_eq!(&b.data()[0..3], &[0.0, 0.0, 0.0]);
        let s = a.bias(3, 3, AlibiForm::Symmetric)?;
        assert_eq!(&s.data()[0..3], &[0.0, -0.25, -0.5]);
        // with a cache: one query at position 4 over 5 keys
        let c = a.bias(1, 5, AlibiForm::Causal)?;
        assert_eq!(&c.data()[0..5], &[-1.0, -0.75, -0.5, -0.25, 0.0]);
        assert!(a.bias(3, 2, AlibiForm::Causal).is_err());
        assert!(Alibi::new(0).is_err());
        Ok(())
    }
}
