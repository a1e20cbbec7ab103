//! Exact parameter counts, computed from a [`ModelConfig`] component by component.
//!
//! With d = d_model, h heads of d_k features, h_kv key/value heads, d_ff the
//! feed-forward width, V the vocabulary and N layers:
//!
//! - token embeddings V·d; learned positions max_len·d; token types types·d;
//! - attention: W_Q d·(h·d_k), W_K and W_V d·(h_kv·d_k) each, W_O (h·d_k)·d, plus a bias
//!   of each output width when the config has them; QK-norm adds 2·d_k;
//! - feed-forward: W₁ d·d_ff (+ d_ff) and W₂ d_ff·d (+ d), or for a gated FFN three
//!   matrices W_gate, W_up, W_down;
//! - a LayerNorm has 2d parameters (γ, β), an RMSNorm d;
//! - the output head V·d unless tied to the token embeddings; BERT's pooler d·d + d.
//!
//! An encoder layer has self-attention, FFN and two norms (four with sandwich norms); a
//! decoder layer of an encoder-decoder adds cross-attention and a third norm. The
//! encoder-decoder shares one token embedding (and one position table) between both
//! stacks, as the paper does. Encoders (BERT) are counted as the base model, hidden
//! states out: no language-model head.

use serde::Serialize;

use crate::model::config::{
    FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind,
};
use crate::{Error, Result};

/// Parameters of one attention sub-layer, weights and biases apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AttentionCount {
    /// W_Q: d · (h · d_k).
    pub q_weight: u64,
    /// b_Q: h · d_k (0 without qkv biases).
    pub q_bias: u64,
    /// W_K: d · (h_kv · d_k).
    pub k_weight: u64,
    /// b_K: h_kv · d_k.
    pub k_bias: u64,
    /// W_V: d · (h_kv · d_k).
    pub v_weight: u64,
    /// b_V: h_kv · d_k.
    pub v_bias: u64,
    /// W_O: (h · d_k) · d.
    pub o_weight: u64,
    /// b_O: d.
    pub o_bias: u64,
    /// QK-norm scales on queries and keys (2 · d_k for RMSNorm), Gemma 3.
    pub qk_norm: u64,
}

impl AttentionCount {
    /// The four projection matrices W_Q, W_K, W_V, W_O without biases.
    pub fn weights(&self) -> u64 {
        sum_sat(&[self.q_weight, self.k_weight, self.v_weight, self.o_weight])
    }

    /// The four biases.
    pub fn biases(&self) -> u64 {
        sum_sat(&[self.q_bias, self.k_bias, self.v_bias, self.o_bias])
    }

    /// Everything in the sub-layer.
    pub fn total(&self) -> u64 {
        sum_sat(&[self.weights(), self.biases(), self.qk_norm])
    }
}

/// Parameters of one feed-forward network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FfnCount {
    /// W₁ (W_up in a gated FFN): d · d_ff.
    pub up_weight: u64,
    /// b₁: d_ff.
    pub up_bias: u64,
    /// W_gate (gated FFN only): d · d_ff.
    pub gate_weight: u64,
    /// b_gate: d_ff.
    pub gate_bias: u64,
    /// W₂ (W_down): d_ff · d.
    pub down_weight: u64,
    /// b₂: d.
    pub down_bias: u64,
    /// W_g, a mixture of experts' router: n · d (0 without experts; the three weights
    /// above are then those of all n experts).
    #[serde(skip_serializing_if = "is_zero")]
    pub router_weight: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl FfnCount {
    /// The weight matrices.
    pub fn weights(&self) -> u64 {
        sum_sat(&[
            self.up_weight,
            self.gate_weight,
            self.down_weight,
            self.router_weight,
        ])
    }

    /// The biases.
    pub fn biases(&self) -> u64 {
        sum_sat(&[self.up_bias, self.gate_bias, self.down_bias])
    }

    /// Everything in the FFN.
    pub fn total(&self) -> u64 {
        sum_sat(&[self.weights(), self.biases()])
    }
}

/// Parameters of one layer of a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LayerCount {
    /// Self-attention.
    pub self_attention: AttentionCount,
    /// Cross-attention to the encoder's output (decoder of an encoder-decoder).
    pub cross_attention: Option<AttentionCount>,
    /// Feed-forward network.
    pub ffn: FfnCount,
    /// How many norms the layer has (2, 3, 4 or 6).
    pub norm_count: usize,
    /// Parameters of one of those norms (2d for LayerNorm with β, d for RMSNorm).
    pub norm_size: u64,
}

impl LayerCount {
    /// All norms of the layer together.
    pub fn norms(&self) -> u64 {
        (self.norm_count as u64).saturating_mul(self.norm_size)
    }

    /// Everything in one layer.
    pub fn total(&self) -> u64 {
        let cross = self.cross_attention.map_or(0, |a| a.total());
        sum_sat(&[
            self.self_attention.total(),
            cross,
            self.ffn.total(),
            self.norms(),
        ])
    }
}

/// Which stack a [`StackCount`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stack {
    /// The encoder (bidirectional self-attention).
    Encoder,
    /// The decoder (causal self-attention; cross-attention in an encoder-decoder).
    Decoder,
}

impl Stack {
    /// "encoder" or "decoder".
    pub fn name(self) -> &'static str {
        match self {
            Stack::Encoder => "encoder",
            Stack::Decoder => "decoder",
        }
    }
}

/// Parameters of one stack of N identical layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StackCount {
    /// Encoder or decoder.
    pub stack: Stack,
    /// N, the number of layers.
    pub layers: usize,
    /// One layer.
    pub layer: LayerCount,
    /// The norm after the last layer (0 without one).
    pub final_norm: u64,
}

impl StackCount {
    /// N × one layer.
    pub fn all_layers(&self) -> u64 {
        (self.layers as u64).saturating_mul(self.layer.total())
    }

    /// N × one layer + the final norm.
    pub fn total(&self) -> u64 {
        sum_sat(&[self.all_layers(), self.final_norm])
    }
}

/// The whole model's parameters, component by component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParamCount {
    /// Token embeddings V · d.
    pub token_embeddings: u64,
    /// Learned position table max_len · d (0 for sinusoidal, RoPE, ALiBi).
    pub position_embeddings: u64,
    /// Token-type (segment) table types · d.
    pub token_type_embeddings: u64,
    /// The norm after the embeddings (BERT).
    pub embedding_norm: u64,
    /// The encoder and/or decoder stack.
    pub stacks: Vec<StackCount>,
    /// BERT's pooler d · d + d.
    pub pooler: u64,
    /// Output head V · d (0 when tied to the token embeddings, and for encoders).
    pub head: u64,
    /// Whether the head reuses the token embeddings.
    pub head_tied: bool,
}

/// The guide's Problem 1 quantities for a config's first stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GuideFigures {
    /// The query projection of one head: d · d_k (no bias).
    pub q_projection_one_head: u64,
    /// W_Q, W_K, W_V, W_O without biases (4d² for multi-head attention with d_k = d/h).
    pub attention_four_matrices_no_bias: u64,
    /// The feed-forward network with its biases as configured (d·d_ff + d_ff + d_ff·d + d).
    pub ffn: u64,
    /// All norms of one layer (2 LayerNorms: 4d).
    pub norms_per_layer: u64,
}

impl ParamCount {
    /// Count every parameter of `cfg` (validated first). Errors when a count would not
    /// fit in 64 bits.
    pub fn of(cfg: &ModelConfig) -> Result<ParamCount> {
        cfg.validate()?;
        let d = cfg.d_model as u64;
        let v = cfg.vocab_size as u64;
        let norm_size = match cfg.norm {
            NormKind::LayerNorm if cfg.norm_bias => mul(&[2, d])?,
            _ => d,
        };
        let token_embeddings = mul(&[v, d])?;
        let position_embeddings = match cfg.position {
            PositionKind::Learned => mul(&[cfg.max_positions as u64, d])?,
            _ => 0,
        };
        let token_type_embeddings = mul(&[cfg.type_vocab_size as u64, d])?;
        let embedding_norm = if cfg.embedding_norm { norm_size } else { 0 };
        let attention = attention_count(cfg)?;
        let ffn = ffn_count(cfg)?;
        let sublayer_norms = match cfg.norm_placement {
            NormPlacement::Pre | NormPlacement::Post | NormPlacement::OnOutput => 1,
            NormPlacement::Sandwich => 2,
        };
        let final_norm = if cfg.final_norm { norm_size } else { 0 };
        let encoder = StackCount {
            stack: Stack::Encoder,
            layers: cfg.encoder_layers,
            layer: LayerCount {
                self_attention: attention,
                cross_attention: None,
                ffn,
                norm_count: 2 * sublayer_norms,
                norm_size,
            },
            final_norm,
        };
        let cross = cfg.kind == ModelKind::EncoderDecoder;
        let decoder = StackCount {
            stack: Stack::Decoder,
            layers: cfg.decoder_layers,
            layer: LayerCount {
                self_attention: attention,
                cross_attention: cross.then_some(attention),
                ffn,
                norm_count: if cross { 3 } else { 2 } * sublayer_norms,
                norm_size,
            },
            final_norm,
        };
        let stacks = match cfg.kind {
            ModelKind::Encoder => vec![encoder],
            ModelKind::Decoder => vec![decoder],
            ModelKind::EncoderDecoder => vec![encoder, decoder],
        };
        let pooler = if cfg.pooler {
            add(&[mul(&[d, d])?, d])?
        } else {
            0
        };
        let has_head = cfg.kind != ModelKind::Encoder;
        let head = if has_head && !cfg.tie_embeddings {
            token_embeddings
        } else {
            0
        };
        let count = ParamCount {
            token_embeddings,
            position_embeddings,
            token_type_embeddings,
            embedding_norm,
            stacks,
            pooler,
            head,
            head_tied: has_head && cfg.tie_embeddings,
        };
        // Check the grand total exactly once; every partial sum is below it, so the
        // saturating sums of the accessors are exact.
        let mut terms = vec![
            count.token_embeddings,
            count.position_embeddings,
            count.token_type_embeddings,
            count.embedding_norm,
            count.pooler,
            count.head,
        ];
        for s in &count.stacks {
            let l = &s.layer;
            let cross = l.cross_attention.unwrap_or_default();
            let layer = add(&[
                l.self_attention.weights(),
                l.self_attention.biases(),
                l.self_attention.qk_norm,
                cross.weights(),
                cross.biases(),
                cross.qk_norm,
                l.ffn.weights(),
                l.ffn.biases(),
                mul(&[l.norm_count as u64, l.norm_size])?,
            ])?;
            terms.push(mul(&[s.layers as u64, layer])?);
            terms.push(s.final_norm);
        }
        add(&terms)?;
        Ok(count)
    }

    /// Token, position and token-type embeddings and the embedding norm.
    pub fn embeddings(&self) -> u64 {
        sum_sat(&[
            self.token_embeddings,
            self.position_embeddings,
            self.token_type_embeddings,
            self.embedding_norm,
        ])
    }

    /// Every parameter of the model.
    pub fn total(&self) -> u64 {
        let stacks = self
            .stacks
            .iter()
            .fold(0u64, |a, s| a.saturating_add(s.total()));
        sum_sat(&[self.embeddings(), stacks, self.pooler, self.head])
    }

    /// The guide's Problem 1 answers for this config (first stack's layer).
    pub fn guide_figures(&self, cfg: &ModelConfig) -> GuideFigures {
        let layer = self.stacks.first().map(|s| s.layer);
        GuideFigures {
            q_projection_one_head: (cfg.d_model as u64).saturating_mul(cfg.head_dim as u64),
            attention_four_matrices_no_bias: layer.map_or(0, |l| l.self_attention.weights()),
            ffn: layer.map_or(0, |l| l.ffn.total()),
            norms_per_layer: layer.map_or(0, |l| l.norms()),
        }
    }
}

/// One attention sub-layer of `cfg`.
fn attention_count(cfg: &ModelConfig) -> Result<AttentionCount> {
    let d = cfg.d_model as u64;
    let q = cfg.q_dim() as u64;
    let kv = cfg.kv_dim() as u64;
    let bias = |on: bool, n: u64| if on { n } else { 0 };
    let norm_size = match cfg.norm {
        NormKind::LayerNorm if cfg.norm_bias => mul(&[2, cfg.head_dim as u64])?,
        _ => cfg.head_dim as u64,
    };
    Ok(AttentionCount {
        q_weight: mul(&[d, q])?,
        q_bias: bias(cfg.qkv_bias, q),
        k_weight: mul(&[d, kv])?,
        k_bias: bias(cfg.qkv_bias, kv),
        v_weight: mul(&[d, kv])?,
        v_bias: bias(cfg.qkv_bias, kv),
        o_weight: mul(&[q, d])?,
        o_bias: bias(cfg.attn_out_bias, d),
        qk_norm: match (cfg.qk_norm, cfg.qk_norm_whole) {
            (false, _) => 0,
            // one γ over all query heads and one over all key heads (OLMo 2)
            (true, true) => q.saturating_add(kv),
            (true, false) => mul(&[2, norm_size])?,
        },
    })
}

/// One feed-forward network of `cfg`.
fn ffn_count(cfg: &ModelConfig) -> Result<FfnCount> {
    let d = cfg.d_model as u64;
    if let Some(ex) = &cfg.experts {
        // n gated experts of width d_ff_e, no biases, and the router.
        let (n, f) = (ex.n_experts as u64, ex.d_ff as u64);
        return Ok(FfnCount {
            up_weight: mul(&[n, d, f])?,
            gate_weight: mul(&[n, d, f])?,
            down_weight: mul(&[n, f, d])?,
            router_weight: mul(&[n, d])?,
            ..FfnCount::default()
        });
    }
    let f = cfg.d_ff as u64;
    let bias = |n: u64| if cfg.ffn_bias { n } else { 0 };
    let gated = cfg.ffn == FfnKind::Gated;
    Ok(FfnCount {
        up_weight: mul(&[d, f])?,
        up_bias: bias(f),
        gate_weight: if gated { mul(&[d, f])? } else { 0 },
        gate_bias: if gated { bias(f) } else { 0 },
        down_weight: mul(&[f, d])?,
        down_bias: bias(d),
        router_weight: 0,
    })
}

fn overflow() -> Error {
    Error::Argument("the parameter count does not fit in 64 bits; use smaller dimensions".into())
}

/// The product, or an error on overflow.
fn mul(factors: &[u64]) -> Result<u64> {
    factors
        .iter()
        .try_fold(1u64, |a, &b| a.checked_mul(b))
        .ok_or_else(overflow)
}

/// The sum, or an error on overflow.
fn add(terms: &[u64]) -> Result<u64> {
    terms
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b))
        .ok_or_else(overflow)
}

/// A sum that cannot overflow once [`ParamCount::of`] has checked the total.
fn sum_sat(terms: &[u64]) -> u64 {
    terms.iter().fold(0u64, |a, &b| a.saturating_add(b))
}
