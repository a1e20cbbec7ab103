//! Relative positions as a learned bias on the attention scores (Shaw et al. 2018; the
//! bucketed form of T5, Raffel et al. 2020, §2.1, which MPNet also uses).
//!
//! Instead of telling each token where it sits, attention is told how far each key is
//! from each query: the score of query i for key j gets a learned scalar per head,
//! looked up by the *bucket* of the relative position r = j − i:
//!
//! score(i, j) = q_i · k_j / √d_k + B[bucket(j − i), head]
//!
//! Buckets: near distances get one bucket each, far ones share logarithmically wider
//! buckets, and everything at or beyond `max_distance` shares the last one. With
//! `bidirectional`, half the buckets are for keys after the query (r > 0) and half for
//! keys at or before it. With n = |r| (or n = max(−r, 0) one-way), B buckets per side
//! and e = B / 2 exact ones:
//!
//! bucket(n) = n                                                    if n < e
//!           = min(B − 1, e + ⌊ln(n / e) / ln(max_distance / e) · (B − e)⌋)  otherwise
//!
//! The logarithm is taken in f32, as the reference implementations do, so that the
//! bucket edges (where the formula lands on a whole number) agree with them exactly.
//!
//! The bias depends only on t_q, t_k and the table, so a model computes it once per
//! forward pass and every layer adds the same one (MPNet; T5 shares it the same way).

use crate::tensor::Tensor;
use crate::{Error, Result};

/// How relative positions are bucketed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelativePositionConfig {
    /// Number of buckets (rows of the bias table); MPNet and T5 use 32.
    pub num_buckets: usize,
    /// Distances at or beyond this share the last bucket (128 in MPNet and T5).
    pub max_distance: usize,
    /// Keys before and after the query get separate buckets (encoders); false: keys
    /// after the query share bucket 0 with the query itself (causal decoders).
    pub bidirectional: bool,
}

impl RelativePositionConfig {
    /// MPNet's (and T5 encoder's) setting: 32 buckets, max distance 128, bidirectional.
    pub const MPNET: RelativePositionConfig = RelativePositionConfig {
        num_buckets: 32,
        max_distance: 128,
        bidirectional: true,
    };

    /// Check that the buckets make sense: at least 2 per direction (4 bidirectional),
    /// and a max distance beyond the exact buckets.
    pub fn validate(&self) -> Result<()> {
        let per_side = if self.bidirectional {
            self.num_buckets / 2
        } else {
            self.num_buckets
        };
        if per_side < 2 || (self.bidirectional && !self.num_buckets.is_multiple_of(2)) {
            return Err(Error::Config(format!(
                "relative position buckets: {} buckets{} are too few (need at least 2 per direction, an even number when bidirectional)",
                self.num_buckets,
                if self.bidirectional { " (bidirectional)" } else { "" }
            )));
        }
        if self.max_distance <= per_side / 2 {
            return Err(Error::Config(format!(
                "relative position buckets: max_distance {} must exceed the {} exact buckets",
                self.max_distance,
                per_side / 2
            )));
        }
        Ok(())
    }

    /// The bucket of relative position `relative` = key position − query position.
    pub fn bucket(&self, relative: i64) -> usize {
        let mut ret = 0usize;
        let mut buckets = self.num_buckets;
        let n: u64 = if self.bidirectional {
            buckets /= 2;
            if relative > 0 {
                ret += buckets;
            }
            relative.unsigned_abs()
        } else {
            (-relative).max(0) as u64
        };
        let exact = buckets / 2;
        let bucket = if (n as usize) < exact {
            n as usize
        } else {
            // f32 throughout, as the reference (PyTorch float tensors) computes it.
            let ratio = (n as f32 / exact as f32).ln()
                / ((self.max_distance as f64 / exact as f64).ln() as f32);
            let large = exact + (ratio * (buckets - exact) as f32) as usize;
            large.min(buckets - 1)
        };
        ret + bucket
    }
}

/// The learned bucket table and its config: one scalar per (bucket, head).
#[derive(Clone, Debug)]
pub struct RelativePositionBias {
    config: RelativePositionConfig,
    /// B: (num_buckets, h).
    table: Tensor,
}

impl RelativePositionBias {
    /// Wrap a trained table (MPNet's `encoder.relative_attention_bias.weight`).
    ///
    /// # Shapes
    /// table: (num_buckets, h)
    pub fn new(table: Tensor, config: RelativePositionConfig) -> Result<Self> {
        config.validate()?;
        match table.shape() {
            [nb, h] if *nb == config.num_buckets && *h > 0 => {}
            other => {
                return Err(Error::Shape(format!(
                    "relative position bias table has shape {other:?}, expected [{}, heads]",
                    config.num_buckets
                )))
            }
        }
        Ok(RelativePositionBias { config, table })
    }

    /// The bucketing.
    pub fn config(&self) -> &RelativePositionConfig {
        &self.config
    }

    /// The table B.
    ///
    /// # Shapes
    /// → (num_buckets, h)
    pub fn table(&self) -> &Tensor {
        &self.table
    }

    /// Number of heads h.
    pub fn n_heads(&self) -> usize {
        self.table.shape()[1]
    }

    /// The bias for `t_q` queries at positions 0.. over `t_k` keys at positions 0..:
    /// bias[0, h, i, j] = B[bucket(j − i), h].
    ///
    /// # Shapes
    /// → (1, h, t_q, t_k), ready for `AttentionOptions::bias`
    pub fn bias(&self, t_q: usize, t_k: usize) -> Result<Tensor> {
        let h = self.n_heads();
        if t_q == 0 || t_k == 0 {
            return Tensor::new(Vec::new(), &[1, h, t_q, t_k]);
        }
        // One bucket per distinct relative position r = j − i ∈ [−(t_q−1), t_k−1].
        let offset = t_q as i64 - 1;
        let buckets: Vec<usize> = (-offset..t_k as i64)
            .map(|r| self.config.bucket(r))
            .collect();
        let b = self.table.data();
        let mut data = vec![0.0f32; h * t_q * t_k];
        for (head, plane) in data.chunks_mut(t_q * t_k).enumerate() {
            for (i, row) in plane.chunks_mut(t_k).enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    let bucket = buckets[(j as i64 - i as i64 + offset) as usize];
                    *v = b[bucket * h + head];
                }
            }
        }
        Tensor::new(data, &[1, h, t_q, t_k]) // (1, h, t_q, t_k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    /// PyTorch golden values: `MPNetEncoder.relative_position_bucket(torch.arange(-600,
    /// 601), 32, 128)` (transformers 4.x, torch 2.x), printed as runs (first relative
    /// position of the run, bucket). Every r in [−600, 600] is covered.
    const MPNET_BUCKET_RUNS: &[(i64, usize)] = &[
        (-600, 15),
        (-90, 14),
        (-63, 13),
        (-45, 12),
        (-31, 11),
        (-22, 10),
        (-15, 9),
        (-11, 8),
        (-7, 7),
        (-6, 6),
        (-5, 5),
        (-4, 4),
        (-3, 3),
        (-2, 2),
        (-1, 1),
        (0, 0),
        (1, 17),
        (2, 18),
        (3, 19),
        (4, 20),
        (5, 21),
        (6, 22),
        (7, 23),
        (8, 24),
        (12, 25),
        (16, 26),
        (23, 27),
        (32, 28),
        (46, 29),
        (64, 30),
        (91, 31),
    ];

    #[test]
    fn mpnet_buckets_match_pytorch() -> TestResult {
        let c = RelativePositionConfig::MPNET;
        c.validate()?;
        for (k, &(start, bucket)) in MPNET_BUCKET_RUNS.iter().enumerate() {
            let end = MPNET_BUCKET_RUNS.get(k + 1).map_or(601, |r| r.0);
            for r in start..end {
                assert_eq!(c.bucket(r), bucket, "relative position {r}");
            }
        }
        assert!(!MPNET_BUCKET_RUNS.is_empty());
        Ok(())
    }

    #[test]
    fn bias_looks_up_the_table_by_bucket() -> TestResult {
        let c = RelativePositionConfig::MPNET;
        let h = 3;
        let table = Tensor::from_fn(&[32, h], |i| i as f32);
        let rpb = RelativePositionBias::new(table.clone(), c)?;
        let bias = rpb.bias(4, 6)?;
        assert_eq!(bias.shape(), &[1, h, 4, 6]);
        for head in 0..h {
            for i in 0..4 {
                for j in 0..6 {
                    let want = table.data()[c.bucket(j as i64 - i as i64) * h + head];
                    assert_eq!(bias.data()[(head * 4 + i) * 6 + j], want);
                }
            }
        }
        assert!(RelativePositionBias::new(Tensor::zeros(&[31, h]), c).is_err());
        let odd = RelativePositionConfig {
            num_buckets: 3,
            ..c
        };
        assert!(odd.validate().is_err());
        Ok(())
    }

    #[test]
    fn one_way_buckets_fold_future_keys_into_zero() {
        let c = RelativePositionConfig {
            bidirectional: false,
            ..RelativePositionConfig::MPNET
        };
        assert_eq!(c.bucket(5), 0);
        assert_eq!(c.bucket(0), 0);
        assert_eq!(c.bucket(-3), 3);
        assert_eq!(c.bucket(-10_000), 31);
    }
}
