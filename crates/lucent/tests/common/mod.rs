//! Shared by the test binaries that build small random models of every kind
//! (`mod common;`): one small checked-shape config, so each file states only what it
//! changes.

use lucent::model::config::{FfnKind, ModelKind, NormKind, NormPlacement, PositionKind};
use lucent::ops::{Activation, RopeConvention, RopeScaling};
use lucent::ModelConfig;

/// A small post-norm LayerNorm / GELU-MLP model of `kind` with `position`: d 24, 4
/// heads of 6, FFN 40, vocabulary 50, 64 positions; 2 encoder and/or 3 decoder layers
/// (2 + 2 for an encoder-decoder).
pub fn small_config(kind: ModelKind, position: PositionKind) -> ModelConfig {
    let (enc, dec) = match kind {
        ModelKind::Encoder => (2, 0),
        ModelKind::Decoder => (0, 3),
        ModelKind::EncoderDecoder => (2, 2),
    };
    ModelConfig {
        family: "test".into(),
        kind,
        vocab_size: 50,
        d_model: 24,
        encoder_layers: enc,
        decoder_layers: dec,
        n_heads: 4,
        n_kv_heads: 4,
        head_dim: 6,
        d_ff: 40,
        max_positions: 64,
        type_vocab_size: 0,
        position,
        norm: NormKind::LayerNorm,
        norm_placement: NormPlacement::Post,
        norm_eps: 1e-5,
        embedding_norm: false,
        final_norm: false,
        ffn: FfnKind::Mlp,
        activation: Activation::Gelu,
        qkv_bias: true,
        attn_out_bias: true,
        ffn_bias: true,
        norm_bias: true,
        qk_norm: false,
        tie_embeddings: false,
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

/// LLaMA-like: pre-norm RMSNorm, SwiGLU, GQA (2 KV heads), RoPE rotate-half, no biases, a
/// final norm, on [`small_config`]'s decoder.
pub fn llama_like() -> ModelConfig {
    let mut c = small_config(ModelKind::Decoder, PositionKind::None);
    c.n_kv_heads = 2;
    c.position = PositionKind::Rope {
        base: 10_000.0,
        local_base: None,
        convention: RopeConvention::RotateHalf,
        scaling: RopeScaling::None,
        freq_factors: false,
    };
    c.norm = NormKind::RmsNorm;
    c.norm_placement = NormPlacement::Pre;
    c.final_norm = true;
    c.ffn = FfnKind::Gated;
    c.activation = Activation::Silu;
    (c.qkv_bias, c.attn_out_bias, c.ffn_bias, c.norm_bias) = (false, false, false, false);
    c
}
