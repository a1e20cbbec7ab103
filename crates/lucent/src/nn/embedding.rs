//! `Embedding`: the token table that turns ids into vectors.
//!
//! x[b, t] = E[ids[b, t]] · scale, with E the (V, d) table. The scale is 1 for BERT and
//! GPT-2 and √d for the paper and Gemma ("we multiply those weights by √d_model").

use rand::Rng;

use crate::nn::linear::Weight;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A token embedding table.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// E: (V, d), f32 or quantised (then only looked-up rows are dequantised)
    pub table: Weight,
    /// Multiplies every looked-up vector (1.0 for none).
    pub scale: f32,
}

impl Embedding {
    /// A table (V, d) (an f32 tensor or a quantised matrix) with a scale (1.0 for none).
    pub fn new(table: impl Into<Weight>, scale: f32) -> Result<Self> {
        let table = table.into();
        if table.shape().len() != 2 {
            return Err(Error::Shape(format!(
                "an embedding table must be (vocab, d), got {:?}",
                table.shape()
            )));
        }
        Ok(Embedding { table, scale })
    }

    /// A table drawn from N(0, std²).
    pub fn new_random(vocab: usize, d: usize, std: f32, scale: f32, rng: &mut impl Rng) -> Self {
        Embedding {
            table: Weight::F32(Tensor::randn(&[vocab, d], std, rng)),
            scale,
        }
    }

    /// Vocabulary size V.
    pub fn vocab_size(&self) -> usize {
        self.table.shape().first().copied().unwrap_or(0)
    }

    /// Width d.
    pub fn dim(&self) -> usize {
        self.table.shape().get(1).copied().unwrap_or(0)
    }

    /// Look up a batch of equally long id sequences. Errors name the bad id and where it is.
    ///
    /// # Shapes
    /// ids: b sequences of t → (b, t, d)
    pub fn forward(&self, ids: &[Vec<usize>]) -> Result<Tensor> {
        let b = ids.len();
        let t = ids.first().map_or(0, Vec::len);
        let v = self.vocab_size();
        for (bi, seq) in ids.iter().enumerate() {
            if seq.len() != t {
                return Err(Error::Shape(format!(
                    "embedding: sequence {bi} has {} ids but sequence 0 has {t}; pad the batch to one length",
                    seq.len()
                )));
            }
            if let Some((pos, &id)) = seq.iter().enumerate().find(|(_, &id)| id >= v) {
                return Err(Error::Argument(format!(
                    "embedding: token id {id} (sequence {bi}, position {pos}) is out of range for a table of {v} rows (vocab_size); check the tokenizer matches the model"
                )));
            }
        }
        let flat: Vec<usize> = ids.concat();
        let x = self.table.select_rows(&flat)?; // (b·t, d)
        let x = if self.scale == 1.0 {
            x
        } else {
            x.scale(self.scale)
        };
        x.reshape(&[b, t, self.dim()]) // (b, t, d)
    }
}
