//! Named model configurations (presets) and command-line overrides of them.
//!
//! Each preset is a [`ModelConfig`] with the published dimensions of a real model (from
//! its Hugging Face `config.json`, or the paper for the guides' `transformer-base`), so
//! that parameter counts, memory figures and tensor shapes can be computed for it
//! without downloading anything. [`ConfigOverrides`] changes single dimensions of a
//! preset (or of a GPT-2-style decoder when no preset is named) and re-validates.
//!
//! | preset | facts used |
//! | --- | --- |
//! | `bert-base` | bert-base-uncased: 12 layers, d 768, 12 heads, d_ff 3072, V 30522, 512 positions, 2 token types, post-LayerNorm (ε 1e-12), GELU (erf), pooler |
//! | `gpt2` | gpt2: 12 layers, d 768, 12 heads, d_ff 3072, V 50257, 1024 positions, pre-LayerNorm (ε 1e-5), tanh-GELU, tied head |
//! | `llama-7b` | LLaMA 7B: 32 layers, d 4096, 32 heads, d_ff 11008, V 32000, RoPE 10 000, RMSNorm (ε 1e-6), SwiGLU, untied head |
//! | `minilm` | all-MiniLM-L6-v2: 6 layers, d 384, 12 heads, d_ff 1536, V 30522, 512 positions, 2 token types, pooler |
//! | `smollm2` | SmolLM2-135M: 30 layers, d 576, 9 heads, 3 kv heads, d_ff 1536, V 49152, RoPE 100 000, RMSNorm (ε 1e-5), SwiGLU, tied |
//! | `gemma3` | Gemma 3 270M: 18 layers, d 640, 4 heads, 1 kv head, d_k 256, d_ff 2048, V 262144, QK-norm, window 512 (every 6th layer global), sandwich RMSNorm (ε 1e-6), GeGLU (tanh), embeddings × √d, RoPE 10⁶ global / 10⁴ local, tied |
//! | `transformer-base` | Vaswani et al. 2017, base: 6 + 6 layers, d 512, 8 heads, d_ff 2048, shared V 37000, sinusoidal, post-LayerNorm, ReLU, embeddings × √d, tied |

use crate::model::config::{
    FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind,
};
use crate::ops::{Activation, RopeConvention, RopeScaling};
use crate::{Error, Result};

/// A named preset and what it is.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// The name `preset()` and `--preset` accept.
    pub name: &'static str,
    /// One line saying which model it is.
    pub description: &'static str,
}

/// Every preset, in the order the CLI lists them.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "bert-base",
        description: "bert-base-uncased: BERT encoder, 12 layers, d 768, 12 heads, with pooler (110M)",
    },
    Preset {
        name: "gpt2",
        description: "GPT-2 small: pre-norm decoder, 12 layers, d 768, 12 heads, learned positions, tied head (124M)",
    },
    Preset {
        name: "llama-7b",
        description: "LLaMA 7B: RMSNorm, SwiGLU, RoPE, 32 layers, d 4096, 32 heads, untied head (6.7B)",
    },
    Preset {
        name: "minilm",
        description: "all-MiniLM-L6-v2: BERT encoder, 6 layers, d 384, 12 heads, with pooler (23M)",
    },
    Preset {
        name: "smollm2",
        description: "SmolLM2-135M: LLaMA decoder, 30 layers, d 576, 9 heads / 3 kv heads (GQA), tied (135M)",
    },
    Preset {
        name: "gemma3",
        description: "Gemma 3 270M: 18 layers, d 640, 4 heads / 1 kv head, d_k 256, sliding window 512, sandwich norms (268M)",
    },
    Preset {
        name: "transformer-base",
        description: "the paper's base model: encoder-decoder, 6+6 layers, d 512, 8 heads, d_ff 2048, sinusoidal, post-norm (63M)",
    },
];

/// The comma-separated preset names, for error messages and help.
pub fn preset_names() -> String {
    PRESETS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The [`ModelConfig`] of the preset `name` (see [`PRESETS`]); an unknown name is an
/// error listing the known ones.
pub fn preset(name: &str) -> Result<ModelConfig> {
    let cfg = match name {
        "bert-base" => bert(12, 768, 12, 3072),
        "minilm" => bert(6, 384, 12, 1536),
        "gpt2" => gpt2(),
        "llama-7b" => llama_7b(),
        "smollm2" => smollm2(),
        "gemma3" => gemma3(),
        "transformer-base" => transformer_base(),
        _ => {
            return Err(Error::Argument(format!(
                "unknown preset {name:?}; known presets: {}",
                preset_names()
            )))
        }
    };
    cfg.validate()?;
    Ok(cfg)
}

/// A GPT-2-style decoder (learned positions, pre-LayerNorm, tanh-GELU MLP with biases,
/// tied head) with GPT-2 small's dimensions: the base that command-line dimensions
/// override when no preset is named. Its family is `"custom"`.
pub fn custom_decoder() -> ModelConfig {
    ModelConfig {
        family: "custom".into(),
        ..gpt2()
    }
}

/// Dimensions given on the command line, each replacing the base config's value.
///
/// Rules: a new `d_model` or `heads` recomputes `head_dim = d_model / heads` (which must
/// divide) when the base had `head_dim = d_model / heads`; a base with its own head_dim
/// (Gemma 3) keeps it unless `head_dim` is given. A new `heads` without `kv_heads` keeps
/// multi-head attention multi-head (kv_heads = heads) and keeps a grouped base's
/// kv_heads. `layers` sets the layers of every stack the model has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigOverrides {
    /// Model width d.
    pub d_model: Option<usize>,
    /// Query heads h.
    pub heads: Option<usize>,
    /// Key/value heads.
    pub kv_heads: Option<usize>,
    /// Features per head d_k.
    pub head_dim: Option<usize>,
    /// Feed-forward hidden width.
    pub d_ff: Option<usize>,
    /// Layers of every stack.
    pub layers: Option<usize>,
    /// Encoder layers (encoder-decoder or encoder models).
    pub encoder_layers: Option<usize>,
    /// Decoder layers (encoder-decoder or decoder models).
    pub decoder_layers: Option<usize>,
    /// Vocabulary size V.
    pub vocab_size: Option<usize>,
    /// Longest sequence the positions support.
    pub max_positions: Option<usize>,
}

impl ConfigOverrides {
    /// Whether no dimension is overridden.
    pub fn is_empty(&self) -> bool {
        *self == ConfigOverrides::default()
    }

    /// `base` with these dimensions replaced, validated. Errors name the flag, e.g.
    /// "d_model (10) must be divisible by heads (3)".
    pub fn apply(&self, base: ModelConfig) -> Result<ModelConfig> {
        let mut c = base;
        let positive = |name: &str, v: Option<usize>| -> Result<()> {
            match v {
                Some(0) => Err(Error::Argument(format!("{name} must be > 0, got 0"))),
                _ => Ok(()),
            }
        };
        positive("d_model", self.d_model)?;
        positive("heads", self.heads)?;
        positive("kv_heads", self.kv_heads)?;
        positive("head_dim", self.head_dim)?;
        positive("d_ff", self.d_ff)?;
        positive("layers", self.layers)?;
        positive("encoder_layers", self.encoder_layers)?;
        positive("decoder_layers", self.decoder_layers)?;
        positive("vocab", self.vocab_size)?;
        positive("max_len", self.max_positions)?;

        let coupled = c.n_heads > 0 && c.head_dim * c.n_heads == c.d_model;
        let was_mha = c.n_kv_heads == c.n_heads;
        if let Some(d) = self.d_model {
            c.d_model = d;
        }
        if let Some(h) = self.heads {
            c.n_heads = h;
        }
        if let Some(dk) = self.head_dim {
            c.head_dim = dk;
        } else if coupled && (self.d_model.is_some() || self.heads.is_some()) {
            c.head_dim = ModelConfig::head_dim_for(c.d_model, c.n_heads)?;
        }
        if let Some(kv) = self.kv_heads {
            c.n_kv_heads = kv;
        } else if was_mha {
            c.n_kv_heads = c.n_heads;
        }
        if let Some(f) = self.d_ff {
            c.d_ff = f;
        }
        if let Some(n) = self.layers {
            match c.kind {
                ModelKind::Encoder => c.encoder_layers = n,
                ModelKind::Decoder => c.decoder_layers = n,
                ModelKind::EncoderDecoder => {
                    c.encoder_layers = n;
                    c.decoder_layers = n;
                }
            }
        }
        if let Some(n) = self.encoder_layers {
            if c.kind == ModelKind::Decoder {
                return Err(Error::Argument(format!(
                    "--encoder-layers {n}: the {} config is a decoder only; use --layers",
                    c.family
                )));
            }
            c.encoder_layers = n;
        }
        if let Some(n) = self.decoder_layers {
            if c.kind == ModelKind::Encoder {
                return Err(Error::Argument(format!(
                    "--decoder-layers {n}: the {} config is an encoder only; use --layers",
                    c.family
                )));
            }
            c.decoder_layers = n;
        }
        if let Some(v) = self.vocab_size {
            c.vocab_size = v;
        }
        if let Some(m) = self.max_positions {
            c.max_positions = m;
        }
        c.validate()?;
        Ok(c)
    }
}

/// The preset `name` (or [`custom_decoder`] when `None`) with `overrides` applied.
pub fn resolve(name: Option<&str>, overrides: &ConfigOverrides) -> Result<ModelConfig> {
    let base = match name {
        Some(n) => preset(n)?,
        None => custom_decoder(),
    };
    overrides.apply(base)
}

/// bert-base-uncased and all-MiniLM-L6-v2 differ only in size.
fn bert(layers: usize, d: usize, heads: usize, d_ff: usize) -> ModelConfig {
    ModelConfig {
        family: "bert".into(),
        kind: ModelKind::Encoder,
        vocab_size: 30522,
        d_model: d,
        encoder_layers: layers,
        decoder_layers: 0,
        n_heads: heads,
        n_kv_heads: heads,
        head_dim: d / heads,
        d_ff,
        max_positions: 512,
        type_vocab_size: 2,
        position: PositionKind::Learned,
        norm: NormKind::LayerNorm,
        norm_placement: NormPlacement::Post,
        norm_eps: 1e-12,
        embedding_norm: true,
        final_norm: false,
        ffn: FfnKind::Mlp,
        activation: Activation::Gelu,
        qkv_bias: true,
        attn_out_bias: true,
        ffn_bias: true,
        norm_bias: true,
        qk_norm: false,
        tie_embeddings: true,
        embedding_scale: 1.0,
        sliding_window: None,
        global_every: None,
        attention_scale: None,
        pooler: true,
        qk_norm_whole: false,
        attn_softcap: None,
        final_softcap: None,
        residual_scale: None,
        logit_scale: None,
        attention_scale_in_softmax: false,
        no_rope_every: None,
        experts: None,
    }
}

fn gpt2() -> ModelConfig {
    ModelConfig {
        family: "gpt2".into(),
        kind: ModelKind::Decoder,
        vocab_size: 50257,
        d_model: 768,
        encoder_layers: 0,
        decoder_layers: 12,
        n_heads: 12,
        n_kv_heads: 12,
        head_dim: 64,
        d_ff: 3072,
        max_positions: 1024,
        type_vocab_size: 0,
        position: PositionKind::Learned,
        norm: NormKind::LayerNorm,
        norm_placement: NormPlacement::Pre,
        norm_eps: 1e-5,
        embedding_norm: false,
        final_norm: true,
        ffn: FfnKind::Mlp,
        activation: Activation::GeluTanh,
        qkv_bias: true,
        attn_out_bias: true,
        ffn_bias: true,
        norm_bias: true,
        qk_norm: false,
        tie_embeddings: true,
        embedding_scale: 1.0,
        sliding_window: None,
        global_every: None,
        attention_scale: None,
        pooler: false,
        qk_norm_whole: false,
        attn_softcap: None,
        final_softcap: None,
        residual_scale: None,
        logit_scale: None,
        attention_scale_in_softmax: false,
        no_rope_every: None,
        experts: None,
    }
}

/// A LLaMA-architecture decoder: RMSNorm pre-norm, SwiGLU, RoPE (rotate-half), no biases.
#[allow(clippy::too_many_arguments)]
fn llama(
    layers: usize,
    d: usize,
    heads: usize,
    kv_heads: usize,
    d_ff: usize,
    vocab: usize,
    max_positions: usize,
    rope_base: f32,
    eps: f32,
    tied: bool,
) -> ModelConfig {
    ModelConfig {
        family: "llama".into(),
        kind: ModelKind::Decoder,
        vocab_size: vocab,
        d_model: d,
        encoder_layers: 0,
        decoder_layers: layers,
        n_heads: heads,
        n_kv_heads: kv_heads,
        head_dim: d / heads,
        d_ff,
        max_positions,
        type_vocab_size: 0,
        position: PositionKind::Rope {
            base: rope_base,
            local_base: None,
            convention: RopeConvention::RotateHalf,
            scaling: RopeScaling::None,
            freq_factors: false,
        },
        norm: NormKind::RmsNorm,
        norm_placement: NormPlacement::Pre,
        norm_eps: eps,
        embedding_norm: false,
        final_norm: true,
        ffn: FfnKind::Gated,
        activation: Activation::Silu,
        qkv_bias: false,
        attn_out_bias: false,
        ffn_bias: false,
        norm_bias: false,
        qk_norm: false,
        tie_embeddings: tied,
        embedding_scale: 1.0,
        sliding_window: None,
        global_every: None,
        attention_scale: None,
        pooler: false,
        qk_norm_whole: false,
        attn_softcap: None,
        final_softcap: None,
        residual_scale: None,
        logit_scale: None,
        attention_scale_in_softmax: false,
        no_rope_every: None,
        experts: None,
    }
}

fn llama_7b() -> ModelConfig {
    llama(32, 4096, 32, 32, 11008, 32000, 2048, 10_000.0, 1e-6, false)
}

fn smollm2() -> ModelConfig {
    ModelConfig {
        family: "smollm2".into(),
        ..llama(30, 576, 9, 3, 1536, 49152, 8192, 100_000.0, 1e-5, true)
    }
}

fn gemma3() -> ModelConfig {
    ModelConfig {
        family: "gemma3".into(),
        kind: ModelKind::Decoder,
        vocab_size: 262_144,
        d_model: 640,
        encoder_layers: 0,
        decoder_layers: 18,
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 256,
        d_ff: 2048,
        max_positions: 32_768,
        type_vocab_size: 0,
        position: PositionKind::Rope {
            base: 1_000_000.0,
            local_base: Some(10_000.0),
            convention: RopeConvention::RotateHalf,
            scaling: RopeScaling::None,
            freq_factors: false,
        },
        norm: NormKind::RmsNorm,
        norm_placement: NormPlacement::Sandwich,
        norm_eps: 1e-6,
        embedding_norm: false,
        final_norm: true,
        ffn: FfnKind::Gated,
        activation: Activation::GeluTanh,
        qkv_bias: false,
        attn_out_bias: false,
        ffn_bias: false,
        norm_bias: false,
        qk_norm: true,
        tie_embeddings: true,
        embedding_scale: (640f32).sqrt(),
        sliding_window: Some(512),
        global_every: Some(6),
        // query_pre_attn_scalar = 256 = head_dim: the usual 1/√d_k.
        attention_scale: None,
        pooler: false,
        qk_norm_whole: false,
        attn_softcap: None,
        final_softcap: None,
        residual_scale: None,
        logit_scale: None,
        attention_scale_in_softmax: false,
        no_rope_every: None,
        experts: None,
    }
}

fn transformer_base() -> ModelConfig {
    ModelConfig {
        family: "transformer".into(),
        kind: ModelKind::EncoderDecoder,
        vocab_size: 37000,
        d_model: 512,
        encoder_layers: 6,
        decoder_layers: 6,
        n_heads: 8,
        n_kv_heads: 8,
        head_dim: 64,
        d_ff: 2048,
        // Sinusoidal positions have no table to size; 512 is the longest we promise.
        max_positions: 512,
        type_vocab_size: 0,
        position: PositionKind::Sinusoidal,
        norm: NormKind::LayerNorm,
        norm_placement: NormPlacement::Post,
        norm_eps: 1e-5,
        embedding_norm: false,
        final_norm: false,
        ffn: FfnKind::Mlp,
        activation: Activation::Relu,
        qkv_bias: true,
        attn_out_bias: true,
        ffn_bias: true,
        norm_bias: true,
        qk_norm: false,
        tie_embeddings: true,
        embedding_scale: (512f32).sqrt(),
        sliding_window: None,
        global_every: None,
        attention_scale: None,
        pooler: false,
        qk_norm_whole: false,
        attn_softcap: None,
        final_softcap: None,
        residual_scale: None,
        logit_scale: None,
        attention_scale_in_softmax: false,
        no_rope_every: None,
        experts: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn every_preset_validates() -> TestResult {
        for p in PRESETS {
            let c = preset(p.name)?;
            assert!(c.validate().is_ok(), "{}", p.name);
        }
        Ok(())
    }

    #[test]
    fn unknown_preset_lists_the_names() {
        let e = preset("gpt5").unwrap_err().to_string();
        for p in PRESETS {
            assert!(e.contains(p.name), "{e}");
        }
    }
}
