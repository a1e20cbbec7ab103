//! `DecoderModel`: the generic decoder-only Transformer (GPT-style; LLaMA, SmolLM2,
//! Gemma 3) as a [`ModelConfig`] describes it:
//!
//! x = E[ids] · scale  →  x ← layerₙ(… layer₁(x))  →  final norm  →  logits = x · E_outᵀ
//!
//! with every layer's self-attention causal, and E_out the token table itself when the
//! head is tied. Generation feeds the prompt once (prefill) and then one token at a time
//! through a [`KvCache`], so each step computes only the new position.
//!
//! [`DecoderModel::from_gguf`] builds it from a GGUF file: the family named by
//! `general.architecture` translates the metadata into the config and names the tensors
//! ([`crate::model::family`]); quantised matrices stay quantised (memory-mapped).

use std::path::Path;

use crate::io::gguf::GgufFile;
use crate::model::config::NormPlacement;
use crate::model::family::{gemma3, llama, GgufWeights, Param};
use crate::model::ModelConfig;
use crate::nn::{
    AttentionConfig, AttentionOptions, Decoder, DecoderLayer, Embedding, FeedForward, Head,
    KvCache, Linear, MultiHeadAttention, Norm, RmsNorm, Trace,
};
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The GGUF architectures lucent reads, with their config translation and name table.
pub const ARCHITECTURES: &[&str] = &["llama", "gemma3"];

/// A decoder-only Transformer: token embedding, a causal [`Decoder`] stack (with its
/// final norm), and an output head.
#[derive(Clone, Debug)]
pub struct DecoderModel {
    /// The checked configuration it was built from.
    pub config: ModelConfig,
    /// E: (V, d), with the config's embedding scale.
    pub embedding: Embedding,
    /// The layers and the final norm.
    pub decoder: Decoder,
    /// W_vocab: (V, d) — the token table itself when tied.
    pub head: Head,
    /// How its arithmetic rounds, passed to every layer and op of a forward pass. A GGUF
    /// model runs llama.cpp's ([`Numerics::LlamaCpp`]: its logits equal llama.cpp's);
    /// [`Numerics::RowInvariant`] computes every row as a lone row, so a KV-cached decode
    /// equals the full forward bit for bit ([`DecoderModel::with_numerics`]).
    pub numerics: Numerics,
}

impl DecoderModel {
    /// Open a GGUF file and build the model it holds.
    pub fn load_gguf(path: &Path) -> Result<DecoderModel> {
        DecoderModel::from_gguf(&GgufFile::open(path)?)
    }

    /// The config of a GGUF file, translated by the family its architecture names.
    pub fn config_of(f: &GgufFile) -> Result<ModelConfig> {
        match f.architecture()? {
            "llama" => llama::config(f),
            "gemma3" => gemma3::config(f),
            other => Err(Error::Config(format!(
                "{}: architecture '{other}' is not supported; lucent reads {ARCHITECTURES:?}",
                f.path().display()
            ))),
        }
    }

    /// Build the model from an open GGUF file (weights stay memory-mapped).
    pub fn from_gguf(f: &GgufFile) -> Result<DecoderModel> {
        let cfg = DecoderModel::config_of(f)?;
        let w = match cfg.family.as_str() {
            "gemma3" => gemma3::weights(f, &cfg),
            _ => llama::weights(f, &cfg),
        };
        DecoderModel::load(cfg.clone(), &w)
    }

    /// Build the model for `cfg` from `w`; errors name the missing or mis-shaped tensor.
    pub fn load(cfg: ModelConfig, w: &GgufWeights) -> Result<DecoderModel> {
        cfg.validate()?;
        let eps = cfg.norm_eps;
        let rms = |p: Param, i: usize| -> Result<Norm> {
            Ok(Norm::Rms(RmsNorm::new(w.tensor(p, i)?, eps)?))
        };
        let lin = |p: Param, i: usize| -> Result<Linear> { Linear::new(w.matrix(p, i)?, None) };
        let mut layers = Vec::with_capacity(cfg.decoder_layers);
        for i in 0..cfg.decoder_layers {
            let (qn, kn) = if cfg.qk_norm {
                (
                    Some(RmsNorm::new(w.tensor(Param::QueryNormWeight, i)?, eps)?),
                    Some(RmsNorm::new(w.tensor(Param::KeyNormWeight, i)?, eps)?),
                )
            } else {
                (None, None)
            };
            let attn = MultiHeadAttention::new(
                AttentionConfig::from_model(&cfg, i, false),
                lin(Param::QueryWeight, i)?,
                lin(Param::KeyWeight, i)?,
                lin(Param::ValueWeight, i)?,
                lin(Param::AttnOutWeight, i)?,
                qn,
                kn,
            )?;
            let ffn = FeedForward::gated(
                lin(Param::FfnGateWeight, i)?,
                lin(Param::FfnUpWeight, i)?,
                lin(Param::FfnDownWeight, i)?,
                cfg.activation,
            )?;
            let layer = DecoderLayer::new(
                cfg.norm_placement,
                attn,
                rms(Param::AttnNormWeight, i)?,
                None,
                ffn,
                rms(Param::FfnNormWeight, i)?,
            )?;
            let layer = if cfg.norm_placement == NormPlacement::Sandwich {
                layer.with_post_norms(
                    rms(Param::AttnPostNormWeight, i)?,
                    None,
                    rms(Param::FfnPostNormWeight, i)?,
                )?
            } else {
                layer
            };
            layers.push(layer);
        }
        let final_norm = if cfg.final_norm {
            Some(rms(Param::FinalNormWeight, 0)?)
        } else {
            None
        };
        let table = w.matrix(Param::TokenEmbedding, 0)?;
        let head = if cfg.tie_embeddings || !w.has(Param::OutputWeight, 0) {
            Head::tied_to(&table)?
        } else {
            Head::new(Linear::new(w.matrix(Param::OutputWeight, 0)?, None)?)
        };
        Ok(DecoderModel {
            embedding: Embedding::new(table, cfg.embedding_scale)?,
            decoder: Decoder::new(layers, final_norm)?,
            head,
            config: cfg,
            // The GGUF families run the arithmetic of the engine their files come from.
            numerics: Numerics::LlamaCpp,
        })
    }

    /// The same model with another arithmetic ([`DecoderModel::numerics`]).
    pub fn with_numerics(mut self, numerics: Numerics) -> Self {
        self.numerics = numerics;
        self
    }

    /// A KV cache for one sequence of up to `max_t` positions (capped at the model's
    /// context length).
    pub fn new_cache(&self, max_t: usize) -> KvCache {
        self.decoder
            .new_cache(1, max_t.min(self.config.max_positions).max(1))
    }

    /// Logits for the positions of `ids`, which follow what `cache` holds (None: `ids`
    /// is the whole sequence). `last_only` computes the head for the last position only
    /// (what generation needs). Errors (before any work) if the sequence would not fit
    /// the cache or the model's context.
    ///
    /// # Shapes
    /// ids: t → (t, V), or (1, V) with `last_only`
    pub fn forward(
        &self,
        ids: &[u32],
        cache: Option<&mut KvCache>,
        last_only: bool,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        // The whole pass on a thread of the runtime's pool: its many small parallel
        // products then split between that thread and the others, instead of waking the
        // pool from outside and waiting for it each time.
        crate::tensor::tape::in_pool(|| {
            if crate::threads::threads() > 1 && trace.is_none() && !crate::threads::in_team() {
                // Its many parallel loops (~150 small ones for a decoded token) shared by
                // a team that stays awake for the pass instead of the pool's workers,
                // which would fall asleep between them and be woken each time.
                return crate::threads::with_team(|| {
                    self.forward_here(ids, cache, last_only, None)
                });
            }
            self.forward_here(ids, cache, last_only, trace)
        })
    }

    /// [`DecoderModel::forward`] on the calling thread.
    fn forward_here(
        &self,
        ids: &[u32],
        cache: Option<&mut KvCache>,
        last_only: bool,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let t = ids.len();
        if t == 0 {
            return Err(Error::Argument(
                "no tokens to run the model on; give a non-empty prompt".into(),
            ));
        }
        let past = cache.as_ref().map_or(0, |c| c.len());
        let capacity = cache
            .as_ref()
            .and_then(|c| c.layer(0).map(|l| l.capacity()))
            .unwrap_or(usize::MAX)
            .min(self.config.max_positions);
        if past + t > capacity {
            return Err(Error::Argument(format!(
                "{} tokens ({past} already in context + {t} new) do not fit the context of {capacity} positions; \
                 shorten the prompt or ask for fewer new tokens",
                past + t
            )));
        }
        let ids: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        let x = self.embedding.forward(&[ids])?; // (1, t, d)
        let opts = AttentionOptions {
            numerics: self.numerics,
            ..AttentionOptions::causal()
        };
        let h = if last_only {
            self.decoder
                .forward_last(&x, None, &opts, None, cache, trace)? // (1, 1, d)
        } else {
            self.decoder.forward(&x, None, &opts, None, cache, trace)? // (1, t, d)
        };
        let d = self.config.d_model;
        let h = if last_only {
            h.reshape(&[1, d])? // (1, d)
        } else {
            h.reshape(&[t, d])? // (t, d)
        };
        self.head.logits_with(&h, self.numerics) // (t | 1, V)
    }
}
