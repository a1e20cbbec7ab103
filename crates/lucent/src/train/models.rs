//! The two models lucent trains from scratch, assembled from the same `nn` blocks the
//! pretrained models use.
//!
//! - a GPT ([`new_gpt`]): the generic [`DecoderModel`] in GPT-2's shape: token embedding
//!   and learned positions → N pre-norm decoder layers (causal self-attention,
//!   tanh-GELU MLP) → final LayerNorm → head tied to the token embedding:
//!   logits = h · Eᵀ.
//! - an encoder-decoder ([`new_seq2seq`]): the generic [`EncoderDecoderModel`] in the
//!   guides' shape (Vaswani et al.): embeddings × √d + sinusoidal positions → post-norm
//!   encoder → post-norm decoder with cross-attention → linear head.
//!
//! Both hand out their parameters by name ([`Parameters`]) and run the same forward for
//! training (parameters marked with `requires_grad`) and inference (plain tensors or
//! inside `no_grad`).

use rand::Rng;

use crate::model::config::{ModelKind, NormPlacement, PositionKind};
use crate::model::presets::preset;
use crate::model::{DecoderModel, EncoderDecoderModel, ModelConfig};
use crate::nn::Dropout;
use crate::ops;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The dimensions of a small model to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dims {
    /// Layers (of each stack).
    pub layers: usize,
    /// Model width d.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width (4·d when built from the command line).
    pub d_ff: usize,
    /// Longest sequence (context length, "block size").
    pub block: usize,
    /// Vocabulary size.
    pub vocab: usize,
}

impl Dims {
    fn check(&self) -> Result<()> {
        if self.layers == 0
            || self.d_model == 0
            || self.heads == 0
            || self.block == 0
            || self.vocab == 0
        {
            return Err(Error::Config(format!(
                "layers, d_model, heads, block and vocab must all be > 0, got {self:?}"
            )));
        }
        ModelConfig::head_dim_for(self.d_model, self.heads)?;
        Ok(())
    }

    /// The named preset with these dimensions (`layers` for every stack the preset
    /// has), checked.
    fn config_from(&self, preset_name: &str) -> Result<ModelConfig> {
        self.check()?;
        let mut cfg = preset(preset_name)?;
        cfg.vocab_size = self.vocab;
        cfg.d_model = self.d_model;
        if cfg.encoder_layers > 0 {
            cfg.encoder_layers = self.layers;
        }
        cfg.decoder_layers = self.layers;
        cfg.n_heads = self.heads;
        cfg.n_kv_heads = self.heads;
        cfg.head_dim = self.d_model / self.heads;
        cfg.d_ff = self.d_ff;
        cfg.max_positions = self.block;
        Ok(cfg)
    }
}

/// The config of a GPT-2-shaped language model with these dimensions (family "gpt":
/// learned positions, pre-norm LayerNorm, tanh-GELU MLP, head tied to the embeddings).
pub fn gpt_config(d: &Dims) -> Result<ModelConfig> {
    let mut cfg = d.config_from("gpt2")?;
    cfg.family = "gpt".into();
    cfg.validate()?;
    Ok(cfg)
}

/// A freshly initialised GPT ([`DecoderModel::new_random`]: GPT-2's scheme).
pub fn new_gpt(d: &Dims, rng: &mut impl Rng) -> Result<DecoderModel> {
    DecoderModel::new_random(gpt_config(d)?, rng)
}

/// Mean next-token cross-entropy of `targets` given `ids` (same shapes); `dropout` (in
/// training mode) on the embeddings, as GPT-2 does.
pub fn lm_loss(
    model: &DecoderModel,
    ids: &[Vec<usize>],
    targets: &[Vec<usize>],
    dropout: Option<&mut Dropout>,
) -> Result<Tensor> {
    let logits = model.forward_batch(ids, dropout, None)?; // (b, t, V)
    ops::cross_entropy(&logits, &targets.concat(), None)
}

/// The config of the guides' encoder-decoder with these dimensions (family
/// "transformer": shared embeddings scaled by √d, sinusoidal positions, post-norm
/// layers, an untied head).
pub fn seq2seq_config(d: &Dims) -> Result<ModelConfig> {
    let mut cfg = d.config_from("transformer-base")?;
    cfg.embedding_scale = (d.d_model as f32).sqrt();
    cfg.tie_embeddings = false;
    debug_assert!(cfg.kind == ModelKind::EncoderDecoder);
    debug_assert!(
        cfg.norm_placement == NormPlacement::Post && cfg.position == PositionKind::Sinusoidal
    );
    cfg.validate()?;
    Ok(cfg)
}

/// A freshly initialised encoder-decoder ([`EncoderDecoderModel::new_random`]).
pub fn new_seq2seq(d: &Dims, rng: &mut impl Rng) -> Result<EncoderDecoderModel> {
    EncoderDecoderModel::new_random(seq2seq_config(d)?, rng)
}

/// The real length of each padded source (the position of its first PAD).
pub fn src_lengths(src: &[Vec<usize>]) -> Vec<usize> {
    src.iter()
        .map(|r| {
            r.iter()
                .position(|&id| id == super::data::PAD)
                .unwrap_or(r.len())
        })
        .collect()
}

/// Mean cross-entropy of `tgt_out` (ignoring `pad`) given `src` and `tgt_in`.
pub fn seq2seq_loss(
    model: &EncoderDecoderModel,
    src: &[Vec<usize>],
    tgt_in: &[Vec<usize>],
    tgt_out: &[Vec<usize>],
    pad: usize,
) -> Result<Tensor> {
    let lens = src_lengths(src);
    let logits = model.forward(src, tgt_in, Some(&lens), None)?; // (b, t, V)
    ops::cross_entropy(&logits, &tgt_out.concat(), Some(pad))
}
