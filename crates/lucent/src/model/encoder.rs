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
//! Weights come from a checkpoint through a family's name table ([`Weights`]).

use crate::model::family::{Param, Weights};
use crate::model::{ModelConfig, ModelKind, PositionKind};
use crate::nn::{
    self, AttentionConfig, AttentionOptions, Embedding, EncoderLayer, FeedForward, LayerNorm,
    Linear, MultiHeadAttention, Norm, RmsNorm, Trace,
};
use crate::tensor::Tensor;
use crate::{Error, Result};

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
            if t > pos.vocab_size() {
                return Err(Error::Argument(format!(
                    "input of {t} tokens is longer than the model's {} positions; truncate it (the tokenizer's max_length)",
                    pos.vocab_size()
                )));
            }
            let positions: Vec<usize> = (0..t).collect();
            let p = pos.forward(&[positions])?.reshape(&[t, d])?; // (t, d)
            x = x.add(&p)?; // (b, t, d): broadcast over b
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
                let positions: Vec<usize> = ids.iter().flat_map(|s| 0..s.len()).collect();
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
}

fn norm_from(
    cfg: &ModelConfig,
    w: &Weights,
    weight: Param,
    bias: Param,
    layer: usize,
) -> Result<Norm> {
    let gamma = w.get(weight, layer)?;
    Ok(match cfg.norm {
        crate::model::NormKind::LayerNorm => {
            let beta = if cfg.norm_bias {
                Some(w.get(bias, layer)?)
            } else {
                None
            };
            Norm::Layer(LayerNorm::new(gamma, beta, cfg.norm_eps)?)
        }
        crate::model::NormKind::RmsNorm => Norm::Rms(RmsNorm::new(gamma, cfg.norm_eps)?),
    })
}

fn linear_from(w: &Weights, weight: Param, bias: Option<Param>, layer: usize) -> Result<Linear> {
    let weight = w.get(weight, layer)?;
    let b = bias.map(|b| w.get(b, layer)).transpose()?;
    Linear::new(weight, b)
}

impl EncoderModel {
    /// Build from a checkpoint. Supports what encoder families need: learned or no
    /// absolute positions, token types, an embedding norm, pre- or post-norm MLP layers.
    /// Every tensor is checked against the config's shape (errors name key and shapes).
    pub fn load(config: ModelConfig, w: &Weights) -> Result<Self> {
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
                Some(Embedding::new(w.get(Param::PositionEmbedding, 0)?, 1.0)?)
            }
            PositionKind::None => None,
            other => {
                return Err(Error::Config(format!(
                    "EncoderModel supports learned or no absolute positions, not {other:?}"
                )))
            }
        };
        let token_type = if cfg.type_vocab_size > 0 {
            Some(Embedding::new(w.get(Param::TokenTypeEmbedding, 0)?, 1.0)?)
        } else {
            None
        };
        let norm = if cfg.embedding_norm {
            Some(norm_from(
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
            token: Embedding::new(w.get(Param::TokenEmbedding, 0)?, cfg.embedding_scale)?,
            position,
            token_type,
            norm,
        };
        if cfg.ffn != crate::model::FfnKind::Mlp {
            return Err(Error::Config(
                "EncoderModel loads plain MLP feed-forward layers only (no encoder family uses a gated one yet)".into(),
            ));
        }
        let mut layers = Vec::with_capacity(cfg.encoder_layers);
        for i in 0..cfg.encoder_layers {
            let qb = cfg.qkv_bias;
            let attn = MultiHeadAttention::new(
                AttentionConfig::from_model(cfg, i, false),
                linear_from(w, Param::QueryWeight, qb.then_some(Param::QueryBias), i)?,
                linear_from(w, Param::KeyWeight, qb.then_some(Param::KeyBias), i)?,
                linear_from(w, Param::ValueWeight, qb.then_some(Param::ValueBias), i)?,
                linear_from(
                    w,
                    Param::AttnOutWeight,
                    cfg.attn_out_bias.then_some(Param::AttnOutBias),
                    i,
                )?,
                None,
                None,
            )?;
            let fb = cfg.ffn_bias;
            let ffn = FeedForward::mlp(
                linear_from(w, Param::FfnUpWeight, fb.then_some(Param::FfnUpBias), i)?,
                linear_from(w, Param::FfnDownWeight, fb.then_some(Param::FfnDownBias), i)?,
                cfg.activation,
            )?;
            let attn_norm = norm_from(cfg, w, Param::AttnNormWeight, Param::AttnNormBias, i)?;
            let ffn_norm = norm_from(cfg, w, Param::FfnNormWeight, Param::FfnNormBias, i)?;
            layers.push(EncoderLayer::new(
                cfg.norm_placement,
                attn,
                attn_norm,
                ffn,
                ffn_norm,
            )?);
        }
        if cfg.final_norm {
            return Err(Error::Config(
                "EncoderModel: a final norm is not in the encoder name tables yet".into(),
            ));
        }
        let encoder = nn::Encoder::new(layers, None)?;
        Ok(EncoderModel {
            config,
            embeddings,
            encoder,
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
        // The whole pass on the runtime's pool (its parallel ops then wake no pool).
        crate::tensor::tape::in_pool(|| self.forward_here(ids, type_ids, mask, trace))
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
        let bias = match mask {
            Some(m) if m.iter().any(|row| row.iter().any(|keep| !keep)) => {
                Some(padding_bias(m, b, t)?)
            }
            _ => None,
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
        let h = crate::tensor::tape::in_pool(|| self.encoder.forward(&x, &opts, None))?; // (1, T, d)
        Ok((h, segments))
    }
}

/// The additive attention bias of a padding mask: 0 where the key is a real token, −∞
/// where it is padding.
///
/// # Shapes
/// mask: b rows of t → (b, 1, t, t)
pub fn padding_bias(mask: &[Vec<bool>], b: usize, t: usize) -> Result<Tensor> {
    if mask.len() != b || mask.iter().any(|r| r.len() != t) {
        return Err(Error::Shape(format!(
            "padding mask must be {b} rows of {t}, got {} rows",
            mask.len()
        )));
    }
    let mut data = Vec::with_capacity(b * t * t);
    for row in mask {
        for _ in 0..t {
            data.extend(
                row.iter()
                    .map(|&keep| if keep { 0.0 } else { f32::NEG_INFINITY }),
            );
        }
    }
    Tensor::new(data, &[b, 1, t, t]) // (b, 1, t_q, t_k)
}
