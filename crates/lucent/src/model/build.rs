//! From a [`ModelConfig`] to the `nn` blocks: the one place where the config's fields
//! become each block's own small config, for fresh weights (training) and for weights
//! read from a checkpoint ([`WeightSource`]).
//!
//! The `nn` blocks know nothing of `ModelConfig` (they take an [`AttentionConfig`], a
//! [`Norm`], a [`FeedForward`] …); the generic models ([`crate::model::EncoderModel`],
//! [`crate::model::DecoderModel`], [`crate::model::EncoderDecoderModel`]) are assembled
//! here, so that every family goes through the same code and a config field is honoured
//! (or refused) in one place.
//!
//! Fresh weights follow GPT-2's scheme: N(0, 0.02²), residual output projections
//! N(0, (0.02/√(2N))²), zero biases, unit norms.

use rand::Rng;

use crate::model::config::{ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind};
use crate::model::family::{Param, WeightSource};
use crate::nn::attention::RopeSpec;
use crate::nn::feed_forward::residual_std;
use crate::nn::{
    AttentionConfig, Decoder, DecoderLayer, Embedding, Encoder, EncoderLayer, FeedForward, KvCache,
    LayerNorm, Linear, MixtureOfExperts, MultiHeadAttention, Norm, RmsNorm, Transformer,
};
use crate::{Error, Result};

/// The attention of layer `layer` (`cross`: the decoder's cross-attention, which has no
/// RoPE and no window). Local (windowed) layers use the local RoPE base; the
/// config's NoPE layers (`no_rope_every`) have no RoPE. RoPE's frequency factors are
/// weights, not config: [`self_attention`] reads them into the spec (a config with
/// `freq_factors` gets none here).
pub fn attention_config(cfg: &ModelConfig, layer: usize, cross: bool) -> AttentionConfig {
    let window = if cross {
        None
    } else {
        cfg.window_of_layer(layer)
    };
    let no_rope = cfg
        .no_rope_every
        .is_some_and(|n| (layer + 1).is_multiple_of(n));
    let rope = match cfg.position {
        PositionKind::Rope {
            base,
            local_base,
            convention,
            scaling,
            ..
        } if !cross && !no_rope => Some(RopeSpec {
            base: if window.is_some() {
                local_base.unwrap_or(base)
            } else {
                base
            },
            convention,
            scaling,
            freq_factors: None,
        }),
        _ => None,
    };
    AttentionConfig {
        d_model: cfg.d_model,
        n_heads: cfg.n_heads,
        n_kv_heads: cfg.n_kv_heads,
        head_dim: cfg.head_dim,
        qkv_bias: cfg.qkv_bias,
        out_bias: cfg.attn_out_bias,
        qk_norm: cfg.qk_norm,
        norm_eps: cfg.norm_eps,
        rope,
        window,
        scale: cfg.score_scale(),
        softcap: cfg.attn_softcap,
        scale_queries: cfg.attention_scale.is_some() && !cfg.attention_scale_in_softmax,
    }
}

/// A KV cache for `cfg`'s decoder stack: `b` sequences of up to `max_t` positions.
pub fn kv_cache(cfg: &ModelConfig, b: usize, max_t: usize) -> KvCache {
    KvCache::new(cfg.decoder_layers, b, cfg.n_kv_heads, max_t, cfg.head_dim)
}

// ------------------------------------------------------------------ fresh weights

/// A unit norm of `cfg`'s kind (γ = 1, β = 0).
pub fn fresh_norm(cfg: &ModelConfig) -> Norm {
    Norm::identity(cfg.norm, cfg.d_model, cfg.norm_bias, cfg.norm_eps)
}

fn fresh_sandwich(cfg: &ModelConfig) -> Option<Norm> {
    (cfg.norm_placement == NormPlacement::Sandwich).then(|| fresh_norm(cfg))
}

/// The final norm of a stack, if `cfg` has one.
pub fn fresh_final_norm(cfg: &ModelConfig) -> Option<Norm> {
    cfg.final_norm.then(|| fresh_norm(cfg))
}

/// A token table for `cfg` (vocab_size × d_model, N(0, 0.02²), scaled by
/// `embedding_scale`).
pub fn random_embedding(cfg: &ModelConfig, rng: &mut impl Rng) -> Embedding {
    Embedding::new_random(cfg.vocab_size, cfg.d_model, 0.02, cfg.embedding_scale, rng)
}

/// A feed-forward network of `cfg` in a stack of `n_layers` (out_std = 0.02/√(2N)).
pub fn random_feed_forward(cfg: &ModelConfig, n_layers: usize, rng: &mut impl Rng) -> FeedForward {
    if let Some(ex) = &cfg.experts {
        return FeedForward::Experts(Box::new(MixtureOfExperts::new_random(
            ex.n_experts,
            ex.top_k,
            ex.normalize_weights,
            cfg.activation,
            cfg.d_model,
            ex.d_ff,
            residual_std(n_layers),
            rng,
        )));
    }
    FeedForward::new_random(
        cfg.ffn,
        cfg.activation,
        cfg.d_model,
        cfg.d_ff,
        cfg.ffn_bias,
        residual_std(n_layers),
        rng,
    )
}

/// RoPE frequency factors are read from a checkpoint; fresh weights have none to read.
fn refuse_fresh_freq_factors(cfg: &ModelConfig) -> Result<()> {
    if cfg.rope_freq_factors() {
        return Err(Error::Config(
            "position.freq_factors: RoPE frequency factors come from a checkpoint \
             (rope_freqs.weight); a model with fresh weights has none, so set it to false"
                .into(),
        ));
    }
    Ok(())
}

/// Random weights for layer `layer` of `cfg`'s encoder stack.
pub fn random_encoder_layer(
    cfg: &ModelConfig,
    layer: usize,
    rng: &mut impl Rng,
) -> Result<EncoderLayer> {
    refuse_fresh_freq_factors(cfg)?;
    let n = cfg.encoder_layers;
    let attn =
        MultiHeadAttention::new_random(&attention_config(cfg, layer, false), residual_std(n), rng)?;
    let ffn = random_feed_forward(cfg, n, rng);
    let l = EncoderLayer {
        placement: cfg.norm_placement,
        self_attn: attn,
        self_attn_norm: fresh_norm(cfg),
        self_attn_post_norm: fresh_sandwich(cfg),
        ffn,
        ffn_norm: fresh_norm(cfg),
        ffn_post_norm: fresh_sandwich(cfg),
    };
    l.validate()?;
    Ok(l)
}

/// Random weights for layer `layer` of `cfg`'s decoder stack, with cross-attention
/// when `cross`.
pub fn random_decoder_layer(
    cfg: &ModelConfig,
    layer: usize,
    cross: bool,
    rng: &mut impl Rng,
) -> Result<DecoderLayer> {
    refuse_fresh_freq_factors(cfg)?;
    let n = cfg.decoder_layers;
    let out_std = residual_std(n);
    let self_attn =
        MultiHeadAttention::new_random(&attention_config(cfg, layer, false), out_std, rng)?;
    let cross_attn = if cross {
        Some(MultiHeadAttention::new_random(
            &attention_config(cfg, layer, true),
            out_std,
            rng,
        )?)
    } else {
        None
    };
    let ffn = random_feed_forward(cfg, n, rng);
    let l = DecoderLayer {
        placement: cfg.norm_placement,
        self_attn,
        self_attn_norm: fresh_norm(cfg),
        self_attn_post_norm: fresh_sandwich(cfg),
        cross_attn_norm: cross.then(|| fresh_norm(cfg)),
        cross_attn_post_norm: if cross { fresh_sandwich(cfg) } else { None },
        cross_attn,
        ffn,
        ffn_norm: fresh_norm(cfg),
        ffn_post_norm: fresh_sandwich(cfg),
        residual_scale: cfg.residual_scale,
    };
    l.validate()?;
    Ok(l)
}

/// Random weights for `cfg`'s encoder stack (`cfg.encoder_layers` layers).
pub fn random_encoder(cfg: &ModelConfig, rng: &mut impl Rng) -> Result<Encoder> {
    cfg.validate()?;
    let layers = (0..cfg.encoder_layers)
        .map(|i| random_encoder_layer(cfg, i, rng))
        .collect::<Result<Vec<_>>>()?;
    Encoder::new(layers, fresh_final_norm(cfg))
}

/// Random weights for `cfg`'s decoder stack, with cross-attention when `cfg` is an
/// encoder-decoder.
pub fn random_decoder(cfg: &ModelConfig, rng: &mut impl Rng) -> Result<Decoder> {
    cfg.validate()?;
    let cross = cfg.kind == ModelKind::EncoderDecoder;
    let layers = (0..cfg.decoder_layers)
        .map(|i| random_decoder_layer(cfg, i, cross, rng))
        .collect::<Result<Vec<_>>>()?;
    Decoder::new(layers, fresh_final_norm(cfg))
}

/// Random weights for an encoder-decoder `cfg`'s two stacks.
pub fn random_transformer(cfg: &ModelConfig, rng: &mut impl Rng) -> Result<Transformer> {
    if cfg.kind != ModelKind::EncoderDecoder {
        return Err(Error::Config(format!(
            "Transformer needs kind encoder_decoder, got {:?}",
            cfg.kind
        )));
    }
    Transformer::new(random_encoder(cfg, rng)?, random_decoder(cfg, rng)?)
}

// ------------------------------------------------------------------ checkpoint weights

/// A norm of `cfg`'s kind read from `w` (β only for a LayerNorm with `norm_bias`).
pub fn norm(
    cfg: &ModelConfig,
    w: &dyn WeightSource,
    weight: Param,
    bias: Param,
    layer: usize,
) -> Result<Norm> {
    let gamma = w.tensor(weight, layer)?;
    Ok(match cfg.norm {
        NormKind::LayerNorm => {
            let beta = if cfg.norm_bias {
                Some(w.tensor(bias, layer)?)
            } else {
                None
            };
            Norm::Layer(LayerNorm::new(gamma, beta, cfg.norm_eps)?)
        }
        NormKind::RmsNorm => Norm::Rms(RmsNorm::new(gamma, cfg.norm_eps)?),
    })
}

/// A linear layer read from `w`: the weight (quantised where stored so) and its bias if
/// `bias` names one.
pub fn linear(
    w: &dyn WeightSource,
    weight: Param,
    bias: Option<Param>,
    layer: usize,
) -> Result<Linear> {
    let weight = w.matrix(weight, layer)?;
    let b = bias.map(|b| w.tensor(b, layer)).transpose()?;
    Linear::new(weight, b)
}

/// Layer `i`'s self-attention read from `w`.
pub fn self_attention(
    cfg: &ModelConfig,
    w: &dyn WeightSource,
    i: usize,
) -> Result<MultiHeadAttention> {
    let qb = cfg.qkv_bias;
    let (qn, kn) = if cfg.qk_norm {
        (
            Some(RmsNorm::new(
                w.tensor(Param::QueryNormWeight, i)?,
                cfg.norm_eps,
            )?),
            Some(RmsNorm::new(
                w.tensor(Param::KeyNormWeight, i)?,
                cfg.norm_eps,
            )?),
        )
    } else {
        (None, None)
    };
    let mut config = attention_config(cfg, i, false);
    if let (Some(rope), true) = (&mut config.rope, cfg.rope_freq_factors()) {
        let f = w.tensor(Param::RopeFreqFactors, i)?; // (d_k/2)
        rope.freq_factors = Some(f.data().into());
    }
    MultiHeadAttention::new(
        config,
        linear(w, Param::QueryWeight, qb.then_some(Param::QueryBias), i)?,
        linear(w, Param::KeyWeight, qb.then_some(Param::KeyBias), i)?,
        linear(w, Param::ValueWeight, qb.then_some(Param::ValueBias), i)?,
        linear(
            w,
            Param::AttnOutWeight,
            cfg.attn_out_bias.then_some(Param::AttnOutBias),
            i,
        )?,
        qn,
        kn,
    )
}

/// Layer `i`'s feed-forward network read from `w` (its mixture of experts, when `cfg`
/// has experts).
pub fn feed_forward(cfg: &ModelConfig, w: &dyn WeightSource, i: usize) -> Result<FeedForward> {
    if let Some(ex) = &cfg.experts {
        let router = Linear::new(w.matrix(Param::FfnRouterWeight, i)?, None)?;
        let gates = w.experts(Param::FfnGateExpsWeight, i)?;
        let ups = w.experts(Param::FfnUpExpsWeight, i)?;
        let downs = w.experts(Param::FfnDownExpsWeight, i)?;
        let experts = gates
            .into_iter()
            .zip(ups)
            .zip(downs)
            .map(|((g, u), d)| {
                FeedForward::gated(
                    Linear::new(g, None)?,
                    Linear::new(u, None)?,
                    Linear::new(d, None)?,
                    cfg.activation,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let moe = MixtureOfExperts::new(router, experts, ex.top_k, ex.normalize_weights)?;
        return Ok(FeedForward::Experts(Box::new(moe)));
    }
    let fb = cfg.ffn_bias;
    let ffn = match cfg.ffn {
        crate::model::FfnKind::Mlp => FeedForward::mlp(
            linear(w, Param::FfnUpWeight, fb.then_some(Param::FfnUpBias), i)?,
            linear(w, Param::FfnDownWeight, fb.then_some(Param::FfnDownBias), i)?,
            cfg.activation,
        )?,
        crate::model::FfnKind::Gated => {
            if fb {
                return Err(Error::Config(
                    "ffn_bias: the gated feed-forward networks lucent reads have no biases (no family's name table has them)".into(),
                ));
            }
            FeedForward::gated(
                linear(w, Param::FfnGateWeight, None, i)?,
                linear(w, Param::FfnUpWeight, None, i)?,
                linear(w, Param::FfnDownWeight, None, i)?,
                cfg.activation,
            )?
        }
    };
    Ok(ffn)
}

/// The post-norms of a sandwich layer (on the attention's and the FFN's outputs).
fn post_norms(cfg: &ModelConfig, w: &dyn WeightSource, i: usize) -> Result<(Norm, Norm)> {
    if cfg.norm == NormKind::LayerNorm {
        return Err(Error::Config(
            "norm_placement sandwich with LayerNorm: no family's name table has the post-norms' biases; \
             sandwich layers are read with RMSNorm (Gemma)"
                .into(),
        ));
    }
    Ok((
        norm(cfg, w, Param::AttnPostNormWeight, Param::AttnNormBias, i)?,
        norm(cfg, w, Param::FfnPostNormWeight, Param::FfnNormBias, i)?,
    ))
}

/// The parameters of a layer's two sub-layer norms (attention's, the FFN's): the
/// post-norms' for [`NormPlacement::OnOutput`], whose only norms sit on the outputs
/// (OLMo 2's `post_attention_norm`, `post_ffw_norm`), else the pre-norms'.
fn sublayer_norms(cfg: &ModelConfig) -> (Param, Param) {
    match cfg.norm_placement {
        NormPlacement::OnOutput => (Param::AttnPostNormWeight, Param::FfnPostNormWeight),
        _ => (Param::AttnNormWeight, Param::FfnNormWeight),
    }
}

/// Refuse the fields only a decoder-only model honours (its layers' experts and residual
/// multiplier, its logits' soft-cap and divisor), naming them, for `what`.
fn refuse_decoder_only_fields(cfg: &ModelConfig, what: &str) -> Result<()> {
    for (field, set) in [
        ("experts", cfg.experts.is_some()),
        ("residual_scale", cfg.residual_scale.is_some()),
        ("final_softcap", cfg.final_softcap.is_some()),
        ("logit_scale", cfg.logit_scale.is_some()),
    ] {
        if set {
            return Err(Error::Config(format!(
                "{field}: {what} does not honour it; only decoder-only models (DecoderModel) do"
            )));
        }
    }
    Ok(())
}

/// Encoder layer `i` read from `w`.
pub fn encoder_layer(cfg: &ModelConfig, w: &dyn WeightSource, i: usize) -> Result<EncoderLayer> {
    refuse_decoder_only_fields(cfg, "an encoder")?;
    let (attn_norm, ffn_norm) = sublayer_norms(cfg);
    let layer = EncoderLayer::new(
        cfg.norm_placement,
        self_attention(cfg, w, i)?,
        norm(cfg, w, attn_norm, Param::AttnNormBias, i)?,
        feed_forward(cfg, w, i)?,
        norm(cfg, w, ffn_norm, Param::FfnNormBias, i)?,
    )?;
    if cfg.norm_placement == NormPlacement::Sandwich {
        let (a, f) = post_norms(cfg, w, i)?;
        return layer.with_post_norms(a, f);
    }
    Ok(layer)
}

/// Layer `i`'s cross-attention read from `w` (queries from the decoder, keys and values
/// of the encoder output; no RoPE, no window).
pub fn cross_attention(
    cfg: &ModelConfig,
    w: &dyn WeightSource,
    i: usize,
) -> Result<MultiHeadAttention> {
    if cfg.qk_norm {
        return Err(Error::Config(
            "qk_norm: no encoder-decoder family's name table has QK-norm weights for cross-attention".into(),
        ));
    }
    let qb = cfg.qkv_bias;
    MultiHeadAttention::new(
        attention_config(cfg, i, true),
        linear(
            w,
            Param::CrossQueryWeight,
            qb.then_some(Param::CrossQueryBias),
            i,
        )?,
        linear(
            w,
            Param::CrossKeyWeight,
            qb.then_some(Param::CrossKeyBias),
            i,
        )?,
        linear(
            w,
            Param::CrossValueWeight,
            qb.then_some(Param::CrossValueBias),
            i,
        )?,
        linear(
            w,
            Param::CrossOutWeight,
            cfg.attn_out_bias.then_some(Param::CrossOutBias),
            i,
        )?,
        None,
        None,
    )
}

/// Layer `i` of an encoder-decoder's decoder read from `w`: self-attention,
/// cross-attention, the feed-forward network, each with its norm (pre or post).
pub fn cross_decoder_layer(
    cfg: &ModelConfig,
    w: &dyn WeightSource,
    i: usize,
) -> Result<DecoderLayer> {
    refuse_decoder_only_fields(cfg, "an encoder-decoder's decoder")?;
    if matches!(
        cfg.norm_placement,
        NormPlacement::Sandwich | NormPlacement::OnOutput
    ) {
        return Err(Error::Config(format!(
            "norm_placement {:?}: no encoder-decoder family's name table has post-norms",
            cfg.norm_placement
        )));
    }
    DecoderLayer::new(
        cfg.norm_placement,
        self_attention(cfg, w, i)?,
        norm(cfg, w, Param::AttnNormWeight, Param::AttnNormBias, i)?,
        Some((
            cross_attention(cfg, w, i)?,
            norm(cfg, w, Param::CrossNormWeight, Param::CrossNormBias, i)?,
        )),
        feed_forward(cfg, w, i)?,
        norm(cfg, w, Param::FfnNormWeight, Param::FfnNormBias, i)?,
    )
}

/// `cfg`'s encoder stack read from `w` (`cfg.encoder_layers` layers and the final norm).
pub fn encoder(cfg: &ModelConfig, w: &dyn WeightSource) -> Result<Encoder> {
    let layers = (0..cfg.encoder_layers)
        .map(|i| encoder_layer(cfg, w, i))
        .collect::<Result<Vec<_>>>()?;
    Encoder::new(layers, final_norm(cfg, w)?)
}

/// An encoder-decoder `cfg`'s decoder stack read from `w`, each layer with
/// cross-attention.
pub fn cross_decoder(cfg: &ModelConfig, w: &dyn WeightSource) -> Result<Decoder> {
    let layers = (0..cfg.decoder_layers)
        .map(|i| cross_decoder_layer(cfg, w, i))
        .collect::<Result<Vec<_>>>()?;
    Decoder::new(layers, final_norm(cfg, w)?)
}

/// Decoder-only layer `i` read from `w` (no cross-attention).
pub fn decoder_layer(cfg: &ModelConfig, w: &dyn WeightSource, i: usize) -> Result<DecoderLayer> {
    let (attn_norm, ffn_norm) = sublayer_norms(cfg);
    let mut layer = DecoderLayer::new(
        cfg.norm_placement,
        self_attention(cfg, w, i)?,
        norm(cfg, w, attn_norm, Param::AttnNormBias, i)?,
        None,
        feed_forward(cfg, w, i)?,
        norm(cfg, w, ffn_norm, Param::FfnNormBias, i)?,
    )?;
    if let Some(s) = cfg.residual_scale {
        layer = layer.with_residual_scale(s);
    }
    if cfg.norm_placement == NormPlacement::Sandwich {
        let (a, f) = post_norms(cfg, w, i)?;
        return layer.with_post_norms(a, None, f);
    }
    Ok(layer)
}

/// The final norm of a stack read from `w`, if `cfg` has one.
pub fn final_norm(cfg: &ModelConfig, w: &dyn WeightSource) -> Result<Option<Norm>> {
    if !cfg.final_norm {
        return Ok(None);
    }
    Ok(Some(norm(
        cfg,
        w,
        Param::FinalNormWeight,
        Param::FinalNormBias,
        0,
    )?))
}
