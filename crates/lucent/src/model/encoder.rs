//! `EncoderModel`: the generic encoder-only Transformer (BERT, MiniLM, …) as a
//! [`ModelConfig`] describes it — embeddings, then the [`nn::Encoder`] stack.
//!
//! Embeddings (Devlin et al. 2019, §3 and figure 2):
//!
//! x[b, t] = E_tok[ids[b, t]] · scale + E_pos[t] + E_type[type_ids[b, t]], then LN(x)
//! when the config has an embedding norm;
//!
//! then x ← layerₙ(… layer₁(x)) with self-attention masked by the padding: a key that is
//! padding gets −∞ added to its score, so no real token attends to it and every real
//! row comes out exactly as if the batch held that sentence alone.
//!
//! RoBERTa-style families (RoBERTa, MPNet) number positions after the padding id
//! ([`PositionIds::AfterPadding`]); MPNet also adds a bucketed relative-position bias
//! ([`RelativePositionBias`]) to every layer's scores, computed once per pass.
//!
//! Weights come from a checkpoint through a family's name table ([`Weights`]).

use crate::model::build;
use crate::model::family::{Param, WeightSource};
use crate::model::{ModelConfig, ModelKind, PositionKind};
use crate::nn::mask::key_padding_bias;
use crate::nn::{self, AttentionOptions, Embedding, Norm, RelativePositionBias, Trace};
use crate::runtime::Precision;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Tokens of a pass up to which its threads form a team for the whole pass
/// (`threads::with_team`): a sentence's ~40 small products then share out their work
/// without waking the pool each time.
const TEAM_MAX_ROWS: usize = 256;

/// How the rows of the learned position table are numbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PositionIds {
    /// Token t takes row t (BERT).
    #[default]
    FromZero,
    /// RoBERTa's numbering (also MPNet's, XLM-R's): rows 0..=padding_idx are never
    /// used by real tokens; the k-th non-padding token (k = 1, 2, …) takes row
    /// padding_idx + k and a padding token takes row padding_idx.
    AfterPadding {
        /// The padding token's id, which is also the padding row (`pad_token_id`).
        padding_idx: usize,
    },
}

impl PositionIds {
    /// The position row of each token of one sequence.
    pub fn of(self, ids: &[usize]) -> Vec<usize> {
        match self {
            PositionIds::FromZero => (0..ids.len()).collect(),
            PositionIds::AfterPadding { padding_idx } => {
                let mut k = 0;
                ids.iter()
                    .map(|&id| {
                        if id == padding_idx {
                            padding_idx
                        } else {
                            k += 1;
                            padding_idx + k
                        }
                    })
                    .collect()
            }
        }
    }
}

/// Token, position and token-type embeddings, summed, and the optional norm after them.
#[derive(Clone, Debug)]
pub struct Embeddings {
    /// E_tok: (V, d), with the config's embedding scale.
    pub token: Embedding,
    /// E_pos: (max_positions, d), for learned absolute positions.
    pub position: Option<Embedding>,
    /// E_type: (type_vocab_size, d), BERT's segment embeddings.
    pub token_type: Option<Embedding>,
    /// The norm after the sum (BERT's `embeddings.LayerNorm`).
    pub norm: Option<Norm>,
    /// How positions are numbered.
    pub position_ids: PositionIds,
}

impl Embeddings {
    /// Embed a padded batch of ids; `type_ids` None means all type 0.
    ///
    /// # Shapes
    /// ids, type_ids: b sequences of t → (b, t, d)
    pub fn forward(&self, ids: &[Vec<usize>], type_ids: Option<&[Vec<usize>]>) -> Result<Tensor> {
        let mut x = self.token.forward(ids)?; // (b, t, d)
        let [b, t, d] = x.dims()?;
        if let Some(pos) = &self.position {
            let rows = self.position_rows(ids, t)?;
            if rows.len() == 1 {
                let p = pos.forward(&rows)?.reshape(&[t, d])?; // (t, d)
                x = x.add(&p)?; // (b, t, d): broadcast over b
            } else {
                x.add_assign(&pos.forward(&rows)?)?; // (b, t, d)
            }
        }
        if let Some(tt) = &self.token_type {
            let zeros;
            let types = match type_ids {
                Some(ty) => ty,
                None => {
                    zeros = vec![vec![0usize; t]; b];
                    &zeros[..]
                }
            };
            x.add_assign(&tt.forward(types)?)?; // (b, t, d)
        }
        match &self.norm {
            Some(n) => n.forward(&x),
            None => Ok(x),
        }
    }
}

impl Embeddings {
    /// The position rows of a padded batch: one shared row of 0..t when positions are
    /// numbered from zero, else one per sequence. An error if a row is past the table.
    fn position_rows(&self, ids: &[Vec<usize>], t: usize) -> Result<Vec<Vec<usize>>> {
        let Some(pos) = &self.position else {
            return Ok(Vec::new());
        };
        let rows = match self.position_ids {
            PositionIds::FromZero => vec![(0..t).collect::<Vec<usize>>()],
            p => ids.iter().map(|s| p.of(s)).collect(),
        };
        let last = rows.iter().flatten().copied().max().unwrap_or(0);
        if t > 0 && last >= pos.vocab_size() {
            return Err(Error::Argument(format!(
                "input of {t} tokens needs position {last}, past the model's {} positions; truncate it (the tokenizer's max_length)",
                pos.vocab_size()
            )));
        }
        Ok(rows)
    }
}

impl Embeddings {
    /// Embed sequences of different lengths packed end to end, as one batch of one:
    /// every sequence's positions restart at 0. `type_ids` None means all type 0.
    ///
    /// # Shapes
    /// ids: n sequences of t₀, …, tₙ₋₁ → (1, Σtᵢ, d)
    pub fn forward_packed(
        &self,
        ids: &[Vec<usize>],
        type_ids: Option<&[Vec<usize>]>,
    ) -> Result<Tensor> {
        let flat = vec![ids.concat()];
        let x = self.token.forward(&flat)?; // (1, T, d)
        let mut x = match &self.position {
            Some(pos) => {
                if let Some(long) = ids.iter().find(|s| s.len() > pos.vocab_size()) {
                    return Err(Error::Argument(format!(
                        "input of {} tokens is longer than the model's {} positions; truncate it (the tokenizer's max_length)",
                        long.len(),
                        pos.vocab_size()
                    )));
                }
                let positions: Vec<usize> =
                    ids.iter().flat_map(|s| self.position_ids.of(s)).collect();
                if let Some(&last) = positions.iter().max() {
                    if last >= pos.vocab_size() {
                        return Err(Error::Argument(format!(
                            "input needs position {last}, past the model's {} positions; truncate it (the tokenizer's max_length)",
                            pos.vocab_size()
                        )));
                    }
                }
                x.add(&pos.forward(&[positions])?)? // (1, T, d)
            }
            None => x,
        };
        if let Some(tt) = &self.token_type {
            let types = match type_ids {
                Some(ty) => ty.concat(),
                None => vec![0; flat[0].len()],
            };
            x.add_assign(&tt.forward(&[types])?)?; // (1, T, d)
        }
        match &self.norm {
            Some(n) => n.forward(&x),
            None => Ok(x),
        }
    }
}

/// An encoder-only Transformer: [`Embeddings`] then an [`nn::Encoder`].
#[derive(Clone, Debug)]
pub struct EncoderModel {
    /// The checked configuration it was built from.
    pub config: ModelConfig,
    /// The embedding layer.
    pub embeddings: Embeddings,
    /// The layer stack (and final norm, if the config has one).
    pub encoder: nn::Encoder,
    /// BERT's pooler, tanh(W_p · h_[CLS] + b_p), when the checkpoint has one (sentence
    /// embeddings pool the hidden states themselves and do not use it).
    pub pooler: Option<nn::Linear>,
    /// MPNet's bucketed relative-position bias, shared by all layers (None for BERT).
    pub relative_bias: Option<RelativePositionBias>,
    /// How its products are computed ([`EncoderModel::set_precision`]; exact unless
    /// asked otherwise).
    pub precision: Precision,
}

impl EncoderModel {
    /// Keep every layer's projection and feed-forward weights packed once for the
    /// f32 kernel ([`nn::Linear::keep_packed`]): embedding a sentence then streams the
    /// packed panels instead of packing W's blocks on every product (one sentence at a
    /// time: most of its time), for the same numbers, at the cost of a second copy of
    /// those weights.
    pub fn keep_packed_weights(&mut self) {
        for l in self.layer_linears() {
            l.keep_packed();
        }
    }

    /// Every layer's projections and feed-forward layers (the products a precision
    /// changes; the pooler, unused by sentence embeddings, stays f32).
    fn layer_linears(&mut self) -> Vec<&mut nn::Linear> {
        let mut all = Vec::new();
        for layer in &mut self.encoder.layers {
            let a = &mut layer.self_attn;
            all.extend([&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.o_proj]);
            all.extend(layer.ffn.linears_mut());
        }
        all
    }

    /// Compute the layers' products in `precision`: [`Precision::Int8`] quantises the
    /// weights of Q, K, the attention output and the feed-forward's up projection once
    /// (`nn::Linear::keep_int8`; V and the down projection in bf16, see below),
    /// [`Precision::Bf16`] rounds
    /// every projection and feed-forward weight to bf16 once (`nn::Linear::keep_bf16`),
    /// [`Precision::Exact`] drops those copies and computes from the f32 weights again
    /// (the same bits as a model never changed). Attention's scores and P·V, softmax,
    /// the norms and the residual adds stay f32 in every precision.
    pub fn set_precision(&mut self, precision: Precision) {
        let packed = self.layer_linears().iter().any(|l| l.has_packed());
        for l in self.layer_linears() {
            l.forget_copies();
            if packed {
                l.keep_packed();
            }
            match precision {
                Precision::Exact => {}
                Precision::Int8 => {
                    l.keep_int8();
                }
                Precision::Bf16 => {
                    l.keep_bf16();
                }
            }
        }
        if precision == Precision::Int8 {
            // V and the feed-forward's down projection in bf16, not int8: V's error
            // reaches the output undamped (Q and K pass through the softmax), and the
            // down projection reads GELU's outliers across d_ff. Measured on MPNet's 256
            // benchmark sentences (median cosine to exact): every product in int8
            // 0.99625; V in bf16 0.99779; V and the down projection in bf16 0.99894;
            // any one product alone in int8 (the rest bf16): Q 0.99996, K 0.99993, the
            // attention output 0.99995, the up projection 0.99904, the down projection
            // 0.99888 (docs/precision.md).
            for layer in &mut self.encoder.layers {
                let v = &mut layer.self_attn.v_proj;
                let mut ffn = layer.ffn.linears_mut();
                let down = ffn.pop();
                for l in std::iter::once(v).chain(down) {
                    l.forget_copies();
                    if packed {
                        l.keep_packed();
                    }
                    l.keep_bf16();
                }
            }
        }
        self.precision = precision;
    }

    /// Build from a checkpoint. Supports what encoder families need: learned or no
    /// absolute positions, token types, an embedding norm, pre- or post-norm MLP layers.
    /// Every tensor is checked against the config's shape (errors name key and shapes).
    pub fn load(config: ModelConfig, w: &dyn WeightSource) -> Result<Self> {
        config.validate()?;
        let cfg = &config;
        if cfg.kind != ModelKind::Encoder {
            return Err(Error::Config(format!(
                "EncoderModel needs kind encoder, got {:?}",
                cfg.kind
            )));
        }
        let position = match cfg.position {
            PositionKind::Learned => {
                Some(Embedding::new(w.tensor(Param::PositionEmbedding, 0)?, 1.0)?)
            }
            PositionKind::None => None,
            other => {
                return Err(Error::Config(format!(
                    "EncoderModel supports learned or no absolute positions, not {other:?}"
                )))
            }
        };
        let token_type = if cfg.type_vocab_size > 0 {
            Some(Embedding::new(
                w.tensor(Param::TokenTypeEmbedding, 0)?,
                1.0,
            )?)
        } else {
            None
        };
        let norm = if cfg.embedding_norm {
            Some(build::norm(
                cfg,
                w,
                Param::EmbeddingNormWeight,
                Param::EmbeddingNormBias,
                0,
            )?)
        } else {
            None
        };
        let embeddings = Embeddings {
            token: Embedding::new(w.tensor(Param::TokenEmbedding, 0)?, cfg.embedding_scale)?,
            position,
            token_type,
            norm,
            position_ids: PositionIds::FromZero,
        };
        if cfg.final_norm {
            return Err(Error::Config(
                "final_norm: the encoder name tables have no final norm yet (BERT-family encoders are post-norm)".into(),
            ));
        }
        let layers = (0..cfg.encoder_layers)
            .map(|i| build::encoder_layer(cfg, w, i))
            .collect::<Result<Vec<_>>>()?;
        let encoder = nn::Encoder::new(layers, None)?;
        let pooler = if cfg.pooler && w.has(Param::PoolerWeight, 0) {
            Some(build::linear(
                w,
                Param::PoolerWeight,
                Some(Param::PoolerBias),
                0,
            )?)
        } else {
            None
        };
        Ok(EncoderModel {
            config,
            embeddings,
            encoder,
            pooler,
            relative_bias: None,
            precision: Precision::Exact,
        })
    }

    /// Hidden states of a padded batch. `mask[b][t]` is true for real tokens, false for
    /// padding (padding keys are hidden from attention; padded rows are computed but
    /// meaningless). The trace gets `embeddings` and `encoder.layer.i.*`.
    ///
    /// # Shapes
    /// ids, type_ids, mask: b sequences of t → (b, t, d)
    pub fn forward(
        &self,
        ids: &[Vec<usize>],
        type_ids: Option<&[Vec<usize>]>,
        mask: Option<&[Vec<bool>]>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        // The whole pass on the runtime's pool (its parallel ops then wake no pool); a
        // small one (a sentence) on a team that stays awake for its many small products.
        let rows: usize = ids.iter().map(Vec::len).sum();
        crate::tensor::tape::in_pool(|| {
            if trace.is_none() && rows <= TEAM_MAX_ROWS && !crate::threads::in_team() {
                crate::threads::with_team(|| self.forward_here(ids, type_ids, mask, None))
            } else {
                self.forward_here(ids, type_ids, mask, trace)
            }
        })
    }

    /// [`EncoderModel::forward`] on the calling thread.
    fn forward_here(
        &self,
        ids: &[Vec<usize>],
        type_ids: Option<&[Vec<usize>]>,
        mask: Option<&[Vec<bool>]>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let mut trace = trace;
        let x = self.embeddings.forward(ids, type_ids)?; // (b, t, d)
        let [b, t, _] = x.dims()?;
        if let Some(tr) = trace.as_deref_mut() {
            tr.record("embeddings", &x);
        }
        let padding = match mask {
            Some(m) => key_padding_bias(&lengths_of(m, b, t)?, t, t)?, // (b, 1, t, t)
            None => None,
        };
        let bias = match (&self.relative_bias, padding) {
            (None, padding) => padding,
            (Some(rel), None) => Some(rel.bias(t, t)?), // (1, h, t, t)
            (Some(rel), Some(pad)) => Some(add_head_bias(&rel.bias(t, t)?, &pad)?), // (b, h, t, t)
        };
        let opts = match &bias {
            Some(bias) => AttentionOptions::none().with_bias(bias),
            None => AttentionOptions::none(),
        };
        self.encoder.forward(&x, &opts, trace)
    }
}

impl EncoderModel {
    /// Hidden states of sequences of different lengths without padding: they are packed
    /// end to end into one row of Σtᵢ positions and self-attention keeps each inside its
    /// own segment ([`AttentionOptions::segments`]), so no work is spent on padding and
    /// every sequence comes out as if it ran alone. Returns the states and the segment
    /// boundaries `[0, t₀, t₀+t₁, …]`.
    ///
    /// # Shapes
    /// ids, type_ids: n sequences of t₀, …, tₙ₋₁ → (1, Σtᵢ, d)
    pub fn forward_packed(
        &self,
        ids: &[Vec<usize>],
        type_ids: Option<&[Vec<usize>]>,
    ) -> Result<(Tensor, Vec<usize>)> {
        if ids.iter().any(Vec::is_empty) {
            return Err(Error::Argument(
                "forward_packed: every sequence needs at least one token".into(),
            ));
        }
        if self.relative_bias.is_some() {
            return Err(Error::Argument(format!(
                "forward_packed: a {} encoder has a relative-position bias over all positions; run padded batches (forward) instead",
                self.config.family
            )));
        }
        if let Some(ty) = type_ids {
            if ty.len() != ids.len() || ty.iter().zip(ids).any(|(a, b)| a.len() != b.len()) {
                return Err(Error::Shape(
                    "forward_packed: type_ids must have the shape of ids".into(),
                ));
            }
        }
        let mut segments = vec![0];
        for s in ids {
            segments.push(segments.last().copied().unwrap_or(0) + s.len());
        }
        let x = self.embeddings.forward_packed(ids, type_ids)?; // (1, T, d)
        let opts = AttentionOptions {
            segments: Some(&segments),
            ..AttentionOptions::none()
        };
        let rows = segments.last().copied().unwrap_or(0);
        let h = crate::tensor::tape::in_pool(|| {
            if rows <= TEAM_MAX_ROWS && !crate::threads::in_team() {
                crate::threads::with_team(|| self.encoder.forward(&x, &opts, None))
            } else {
                self.encoder.forward(&x, &opts, None)
            }
        })?; // (1, T, d)
        Ok((h, segments))
    }
}

/// The sum of a per-head bias and a per-sequence padding bias.
///
/// # Shapes
/// rel: (1, h, t, t), pad: (b, 1, t, t) → (b, h, t, t)
fn add_head_bias(rel: &Tensor, pad: &Tensor) -> Result<Tensor> {
    let [_, h, tq, tk] = rel.dims()?;
    let [b, _, _, _] = pad.dims()?;
    let plane = tq * tk;
    let mut out = Vec::with_capacity(b * h * plane);
    for p in pad.data().chunks(plane) {
        for r in rel.data().chunks(plane) {
            out.extend(r.iter().zip(p).map(|(x, y)| x + y));
        }
    }
    Tensor::new(out, &[b, h, tq, tk])
}

/// The real length of each row of a right-padded mask (`true` for real tokens); an
/// error if the mask has another shape or a real token after padding.
fn lengths_of(mask: &[Vec<bool>], b: usize, t: usize) -> Result<Vec<usize>> {
    if mask.len() != b || mask.iter().any(|r| r.len() != t) {
        return Err(Error::Shape(format!(
            "padding mask must be {b} rows of {t}, got {} rows",
            mask.len()
        )));
    }
    mask.iter()
        .enumerate()
        .map(|(i, row)| {
            let len = row.iter().take_while(|&&keep| keep).count();
            if row[len..].iter().any(|&keep| keep) {
                return Err(Error::Argument(format!(
                    "padding mask row {i} has a real token after padding; pad on the right"
                )));
            }
            Ok(len)
        })
        .collect()
}
