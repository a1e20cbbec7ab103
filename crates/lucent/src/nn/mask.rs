//! Attention masks: which keys each query may see.
//!
//! A mask is a boolean matrix M (true = may attend). Attention turns it into an additive
//! bias B with B = 0 where M is true and B = −∞ where it is false, so that
//!
//! softmax(Q·Kᵀ/√d_k + B)
//!
//! gives the hidden keys exactly zero weight (e^−∞ = 0).
//!
//! | mask | used by | rule: query i may see key j when |
//! | --- | --- | --- |
//! | [`bidirectional_mask`] | encoders (BERT) | always |
//! | [`causal_mask`] | decoders (GPT) | j ≤ i |
//! | [`prefix_lm_mask`] | prefix LMs (T5's prefix-LM objective, UniLM) | j < prefix, or j ≤ i |
//! | [`padding_mask`] | batches of different lengths | j < length of that sequence |
//!
//! Masks combine with [`Mask::and`] (e.g. causal and padding). A float mask (any additive
//! bias, such as ALiBi) is checked with [`check_additive`] and passed to attention as it
//! is; [`Mask::from_additive`] reads one back as booleans.
//!
//! Note the convention: here `true` means *visible*. PyTorch's `key_padding_mask` and
//! boolean `attn_mask` use the opposite (true = ignore).

use crate::tensor::Tensor;
use crate::{Error, Result};

/// A boolean attention mask of shape (batch, t_q, t_k): `true` = query i may attend to
/// key j. A batch of 1 is shared by every sequence of the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mask {
    batch: usize,
    t_q: usize,
    t_k: usize,
    /// (batch, t_q, t_k), row-major
    visible: Vec<bool>,
}

fn check_len(what: &str, t: usize) -> Result<()> {
    if t == 0 {
        return Err(Error::Argument(format!(
            "{what}: sequence length must be at least 1, got 0"
        )));
    }
    Ok(())
}

/// The causal (look-ahead) mask of a decoder: query i sees keys 0..=i.
///
/// ```text
/// t = 3:  1 0 0
///         1 1 0
///         1 1 1
/// ```
pub fn causal_mask(t: usize) -> Result<Mask> {
    check_len("causal mask", t)?;
    Ok(Mask::from_fn(1, t, t, |_, i, j| j <= i))
}

/// The causal mask with a KV cache: `t_q` new queries over `t_k` keys; query i sits at
/// position t_k − t_q + i and sees keys up to there.
pub fn causal_mask_cached(t_q: usize, t_k: usize) -> Result<Mask> {
    check_len("causal mask (queries)", t_q)?;
    if t_q > t_k {
        return Err(Error::Argument(format!(
            "causal mask: {t_q} queries but only {t_k} keys (queries are the last keys)"
        )));
    }
    Ok(Mask::from_fn(1, t_q, t_k, |_, i, j| j <= t_k - t_q + i))
}

/// The bidirectional mask of an encoder: every query sees every key.
pub fn bidirectional_mask(t: usize) -> Result<Mask> {
    check_len("bidirectional mask", t)?;
    Ok(Mask::from_fn(1, t, t, |_, _, _| true))
}

/// The prefix-LM mask (T5's prefix language modelling, UniLM): the first `prefix`
/// positions see each other both ways; after that, causal. Query i sees key j when
/// j < prefix or j ≤ i. `prefix` = 0 is the causal mask; `prefix` = t is bidirectional.
pub fn prefix_lm_mask(t: usize, prefix: usize) -> Result<Mask> {
    check_len("prefix-LM mask", t)?;
    if prefix > t {
        return Err(Error::Argument(format!(
            "prefix-LM mask: prefix {prefix} is longer than the sequence ({t}); give --prefix ≤ {t}"
        )));
    }
    Ok(Mask::from_fn(1, t, t, |_, i, j| j < prefix || j <= i))
}

/// Key padding for a batch of sequences padded to length t: in sequence b, every query
/// sees keys j < lengths[b] and none of the padding after.
///
/// Padded query rows still see the real keys (their outputs are ignored downstream), so
/// no row is all −∞ and softmax stays finite.
///
/// # Shapes
/// → a mask of (b, t, t), bias (b, 1, t, t)
pub fn padding_mask(lengths: &[usize], t: usize) -> Result<Mask> {
    check_len("padding mask", t)?;
    if lengths.is_empty() {
        return Err(Error::Argument(
            "padding mask: no sequence lengths given".into(),
        ));
    }
    for (b, &len) in lengths.iter().enumerate() {
        if len == 0 || len > t {
            return Err(Error::Argument(format!(
                "padding mask: sequence {b} has length {len}, must be in 1..={t} (the padded length)"
            )));
        }
    }
    Ok(Mask::from_fn(lengths.len(), t, t, |b, _, j| j < lengths[b]))
}

/// The additive bias that hides padding keys: sequence b of a batch padded to `t_k` keys
/// has `lengths[b]` real ones, and each of the `t_q` queries sees those and none of the
/// padding after them. `None` when nothing is padded (every length is `t_k`): attention
/// then needs no bias at all. This is the one padding mask every model uses (encoder
/// self-attention, cross-attention to a padded source).
///
/// # Shapes
/// → (b, 1, t_q, t_k)
pub fn key_padding_bias(lengths: &[usize], t_q: usize, t_k: usize) -> Result<Option<Tensor>> {
    if let Some((b, &len)) = lengths.iter().enumerate().find(|(_, &l)| l > t_k) {
        return Err(Error::Argument(format!(
            "padding mask: sequence {b} has length {len}, more than the padded length {t_k}"
        )));
    }
    if lengths.iter().all(|&l| l == t_k) {
        return Ok(None);
    }
    Mask::from_fn(lengths.len(), t_q, t_k, |b, _, j| j < lengths[b])
        .to_bias_4d()
        .map(Some)
}

/// Check that a float (additive) mask fits scores of t_q × t_k: shape (t_q, t_k) or
/// (b|1, h|1, t_q, t_k), the shapes attention's `bias` takes. Returns it unchanged.
pub fn check_additive(bias: &Tensor, t_q: usize, t_k: usize) -> Result<&Tensor> {
    let ok = match bias.shape() {
        [a, c] => *a == t_q && *c == t_k,
        [_, _, a, c] => *a == t_q && *c == t_k,
        _ => false,
    };
    if !ok {
        return Err(Error::Shape(format!(
            "additive mask of shape {:?} does not fit {t_q} queries × {t_k} keys \
             (expected [{t_q}, {t_k}] or [b|1, h|1, {t_q}, {t_k}])",
            bias.shape()
        )));
    }
    Ok(bias)
}

impl Mask {
    /// Build from a rule `visible(b, i, j)`.
    pub fn from_fn(
        batch: usize,
        t_q: usize,
        t_k: usize,
        visible: impl Fn(usize, usize, usize) -> bool,
    ) -> Mask {
        let mut v = Vec::with_capacity(batch * t_q * t_k);
        for b in 0..batch {
            for i in 0..t_q {
                for j in 0..t_k {
                    v.push(visible(b, i, j));
                }
            }
        }
        Mask {
            batch,
            t_q,
            t_k,
            visible: v,
        }
    }

    /// Any boolean matrix, row-major, `true` = may attend. `shape` is (t_q, t_k) or
    /// (b, t_q, t_k).
    pub fn from_bools(visible: Vec<bool>, shape: &[usize]) -> Result<Mask> {
        let (batch, t_q, t_k) = match *shape {
            [a, c] => (1, a, c),
            [b, a, c] => (b, a, c),
            _ => {
                return Err(Error::Shape(format!(
                    "a boolean mask is (t_q, t_k) or (b, t_q, t_k), got shape {shape:?}"
                )))
            }
        };
        if batch == 0 || t_q == 0 || t_k == 0 {
            return Err(Error::Shape(format!(
                "boolean mask of shape {shape:?} is empty"
            )));
        }
        if visible.len() != batch * t_q * t_k {
            return Err(Error::Shape(format!(
                "boolean mask of shape {shape:?} needs {} values, got {}",
                batch * t_q * t_k,
                visible.len()
            )));
        }
        Ok(Mask {
            batch,
            t_q,
            t_k,
            visible,
        })
    }

    /// Rows of 0/1 (1 = may attend), as the guides print them: one (t_q, t_k) matrix.
    pub fn from_rows(rows: &[Vec<u8>]) -> Result<Mask> {
        let t_k = rows.first().map_or(0, Vec::len);
        if rows.iter().any(|r| r.len() != t_k) {
            return Err(Error::Shape(
                "boolean mask rows have different lengths".into(),
            ));
        }
        Self::from_bools(
            rows.iter().flatten().map(|&v| v != 0).collect(),
            &[rows.len(), t_k],
        )
    }

    /// Read an additive mask back as booleans: visible where the bias is above −∞.
    /// Accepts (t_q, t_k) or (b, 1, t_q, t_k).
    pub fn from_additive(bias: &Tensor) -> Result<Mask> {
        let (batch, t_q, t_k) = match *bias.shape() {
            [a, c] => (1, a, c),
            [b, 1, a, c] => (b, a, c),
            _ => {
                return Err(Error::Shape(format!(
                    "additive mask must be (t_q, t_k) or (b, 1, t_q, t_k) to read as booleans, got {:?}",
                    bias.shape()
                )))
            }
        };
        Self::from_bools(
            bias.data().iter().map(|&v| v > f32::NEG_INFINITY).collect(),
            &[batch, t_q, t_k],
        )
    }

    /// Sequences in the mask (1 = one mask shared by the whole batch).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Query positions.
    pub fn t_q(&self) -> usize {
        self.t_q
    }

    /// Key positions.
    pub fn t_k(&self) -> usize {
        self.t_k
    }

    /// May query i of sequence b attend to key j? (b is taken mod a shared batch of 1.)
    pub fn get(&self, b: usize, i: usize, j: usize) -> bool {
        let b = if self.batch == 1 { 0 } else { b };
        self.visible[(b * self.t_q + i) * self.t_k + j]
    }

    /// The boolean matrix of sequence b: `rows[i][j]` = query i may attend to key j.
    pub fn matrix(&self, b: usize) -> Vec<Vec<bool>> {
        (0..self.t_q)
            .map(|i| (0..self.t_k).map(|j| self.get(b, i, j)).collect())
            .collect()
    }

    /// The keys query i of sequence b may see.
    pub fn visible_keys(&self, b: usize, i: usize) -> Vec<usize> {
        (0..self.t_k).filter(|&j| self.get(b, i, j)).collect()
    }

    /// Both masks at once (visible only where both allow it), e.g. causal ∧ padding.
    /// A batch of 1 broadcasts against the other's batch.
    pub fn and(&self, other: &Mask) -> Result<Mask> {
        if self.t_q != other.t_q
            || self.t_k != other.t_k
            || (self.batch != other.batch && self.batch != 1 && other.batch != 1)
        {
            return Err(Error::mismatch(
                "mask ∧ mask",
                &[self.batch, self.t_q, self.t_k],
                &[other.batch, other.t_q, other.t_k],
            ));
        }
        let batch = self.batch.max(other.batch);
        Ok(Mask::from_fn(batch, self.t_q, self.t_k, |b, i, j| {
            self.get(b, i, j) && other.get(b, i, j)
        }))
    }

    /// The additive bias attention takes: 0 where visible, −∞ where hidden.
    ///
    /// # Shapes
    /// → (t_q, t_k) for a shared mask (batch 1), else (b, 1, t_q, t_k)
    pub fn to_bias(&self) -> Result<Tensor> {
        let data: Vec<f32> = self
            .visible
            .iter()
            .map(|&v| if v { 0.0 } else { f32::NEG_INFINITY })
            .collect();
        if self.batch == 1 {
            Tensor::new(data, &[self.t_q, self.t_k]) // (t_q, t_k)
        } else {
            Tensor::new(data, &[self.batch, 1, self.t_q, self.t_k]) // (b, 1, t_q, t_k)
        }
    }

    /// The additive bias, always 4-D.
    ///
    /// # Shapes
    /// → (b, 1, t_q, t_k)
    pub fn to_bias_4d(&self) -> Result<Tensor> {
        self.to_bias()?
            .reshape(&[self.batch, 1, self.t_q, self.t_k])
    }

    /// The mask of sequence b as 1.0 / 0.0 (for plots and JSON).
    ///
    /// # Shapes
    /// → (t_q, t_k)
    pub fn to_float(&self, b: usize) -> Result<Tensor> {
        let rows: Vec<Vec<f32>> = self
            .matrix(b)
            .into_iter()
            .map(|r| r.into_iter().map(|v| if v { 1.0 } else { 0.0 }).collect())
            .collect();
        Tensor::from_rows(&rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn ones(m: &Mask, b: usize) -> Vec<Vec<u8>> {
        m.matrix(b)
            .into_iter()
            .map(|r| r.into_iter().map(u8::from).collect())
            .collect()
    }

    #[test]
    fn patterns_exactly() -> TestResult {
        assert_eq!(
            ones(&causal_mask(3)?, 0),
            vec![vec![1, 0, 0], vec![1, 1, 0], vec![1, 1, 1]]
        );
        assert_eq!(
            ones(&bidirectional_mask(2)?, 0),
            vec![vec![1, 1], vec![1, 1]]
        );
        assert_eq!(
            ones(&prefix_lm_mask(4, 2)?, 0),
            vec![
                vec![1, 1, 0, 0],
                vec![1, 1, 0, 0],
                vec![1, 1, 1, 0],
                vec![1, 1, 1, 1]
            ]
        );
        assert_eq!(prefix_lm_mask(4, 0)?, causal_mask(4)?);
        assert_eq!(prefix_lm_mask(4, 4)?, bidirectional_mask(4)?);
        assert_eq!(
            ones(&causal_mask_cached(2, 4)?, 0),
            vec![vec![1, 1, 1, 0], vec![1, 1, 1, 1]]
        );
        let p = padding_mask(&[3, 1], 3)?;
        assert_eq!(ones(&p, 0), vec![vec![1, 1, 1]; 3]);
        assert_eq!(ones(&p, 1), vec![vec![1, 0, 0]; 3]);
        let cp = causal_mask(3)?.and(&p)?;
        assert_eq!(cp.batch(), 2);
        assert_eq!(
            ones(&cp, 0),
            vec![vec![1, 0, 0], vec![1, 1, 0], vec![1, 1, 1]]
        );
        assert_eq!(
            ones(&cp, 1),
            vec![vec![1, 0, 0], vec![1, 0, 0], vec![1, 0, 0]]
        );
        assert_eq!(causal_mask(4)?.visible_keys(0, 2), vec![0, 1, 2]);
        Ok(())
    }

    #[test]
    fn bias_shapes_and_values() -> TestResult {
        let b = causal_mask(2)?.to_bias()?;
        assert_eq!(b.shape(), &[2, 2]);
        assert_eq!(b.data(), &[0.0, f32::NEG_INFINITY, 0.0, 0.0]);
        let p = padding_mask(&[1, 2], 2)?.to_bias()?;
        assert_eq!(p.shape(), &[2, 1, 2, 2]);
        assert_eq!(causal_mask(3)?.to_bias_4d()?.shape(), &[1, 1, 3, 3]);
        // round trip
        let m = prefix_lm_mask(5, 2)?;
        assert_eq!(Mask::from_additive(&m.to_bias()?)?, m);
        assert_eq!(Mask::from_rows(&ones(&m, 0))?, m);
        assert!(check_additive(&b, 2, 2).is_ok());
        assert!(check_additive(&b, 2, 3).is_err());
        Ok(())
    }

    #[test]
    fn errors() -> TestResult {
        assert!(causal_mask(0).is_err());
        assert!(bidirectional_mask(0).is_err());
        assert!(prefix_lm_mask(3, 4).is_err());
        assert!(padding_mask(&[2, 0], 3).is_err());
        assert!(padding_mask(&[4], 3).is_err());
        assert!(padding_mask(&[], 3).is_err());
        assert!(causal_mask_cached(3, 2).is_err());
        assert!(Mask::from_bools(vec![true; 5], &[2, 3]).is_err());
        assert!(Mask::from_bools(vec![], &[0, 3]).is_err());
        assert!(Mask::from_rows(&[vec![1, 0], vec![1]]).is_err());
        assert!(causal_mask(3)?.and(&causal_mask(2)?).is_err());
        assert!(padding_mask(&[1, 2], 2)?
            .and(&padding_mask(&[1, 2, 2], 2)?)
            .is_err());
        Ok(())
    }
}
