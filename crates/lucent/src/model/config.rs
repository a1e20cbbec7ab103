//! `ModelConfig`: one checked description of any Transformer lucent builds.
//!
//! BERT, GPT-2, LLaMA (SmolLM2), Gemma 3 and the guides' encoder-decoder are all one
//! generic model driven by this config (ARCHITECTURE.md, principle 1). A family's own
//! schema (HF `config.json`, GGUF metadata) is translated into a `ModelConfig` and
//! validated once by [`ModelConfig::validate`], whose errors name the field at fault.

use serde::{Deserialize, Serialize};

pub use crate::nn::{FfnKind, NormKind, NormPlacement};
use crate::ops::{Activation, RopeConvention, RopeScaling};
use crate::{Error, Result};

/// Which stacks the model has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Bidirectional encoder only (BERT, MiniLM): text → hidden states.
    Encoder,
    /// Causal decoder only (GPT-2, LLaMA, Gemma): text → next-token logits.
    Decoder,
    /// The original Transformer: encoder, and a decoder with cross-attention.
    EncoderDecoder,
}

/// How the model knows token order.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PositionKind {
    /// No positional information (rarely what you want).
    None,
    /// Fixed sin/cos table added to the embeddings (the paper).
    Sinusoidal,
    /// A learned table added to the embeddings (BERT, GPT-2).
    Learned,
    /// Rotary embedding applied to Q and K inside attention (LLaMA, Gemma).
    Rope {
        /// θ base (10 000 in the paper; 100 000 in SmolLM2).
        base: f32,
        /// base for sliding-window (local) layers, if different (Gemma 3: 10 000).
        local_base: Option<f32>,
        /// Which features are paired.
        convention: RopeConvention,
        /// Linear or YaRN scaling of the angles of every RoPE layer: θᵢ ← θᵢ / s, or YaRN's ramp between θᵢ / s and θᵢ with cos and sin
        /// times a·(1 + 0.1 ln s) (formulas in [`crate::ops::rope`]).
        #[serde(default)]
        scaling: RopeScaling,
        /// The checkpoint carries d_k/2 frequency factors fᵢ that divide θᵢ (Llama
        /// 3.1's frequency bands; GGUF's `rope_freqs.weight`, read by the builder as
        /// `Param::RopeFreqFactors`).
        #[serde(default)]
        freq_factors: bool,
    },
    /// Linear biases on the attention scores, one slope per head (Press et al. 2021).
    Alibi,
}

/// A full description of a Transformer. Dimensions use the guides' letters: d_model
/// (d), heads (h), kv_heads, head_dim (d_k), d_ff, vocab (V), layers (N).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Family name for display ("bert", "llama", "gemma3", "transformer", ...).
    pub family: String,
    /// Encoder, decoder or both.
    pub kind: ModelKind,
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Model width d.
    pub d_model: usize,
    /// Encoder layers (for [`ModelKind::Decoder`]: 0).
    pub encoder_layers: usize,
    /// Decoder layers (for [`ModelKind::Encoder`]: 0).
    pub decoder_layers: usize,
    /// Query heads h.
    pub n_heads: usize,
    /// Key/value heads (= n_heads: multi-head; 1: multi-query; between: grouped-query).
    pub n_kv_heads: usize,
    /// Features per head d_k (usually d_model / n_heads; Gemma 3 sets it apart).
    pub head_dim: usize,
    /// Hidden width of the feed-forward network.
    pub d_ff: usize,
    /// Longest sequence the positions support.
    pub max_positions: usize,
    /// Number of token types (BERT's segment embeddings; 0 for none).
    pub type_vocab_size: usize,
    /// Position scheme.
    pub position: PositionKind,
    /// Normalisation kind.
    pub norm: NormKind,
    /// Normalisation placement.
    pub norm_placement: NormPlacement,
    /// ε inside the normalisation's square root.
    pub norm_eps: f32,
    /// A norm right after the embeddings (BERT's `embeddings.LayerNorm`).
    pub embedding_norm: bool,
    /// A norm after the last layer of each stack (pre-norm models; the torch Transformer).
    pub final_norm: bool,
    /// Feed-forward form.
    pub ffn: FfnKind,
    /// Feed-forward nonlinearity.
    pub activation: Activation,
    /// Biases on the Q, K, V projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub attn_out_bias: bool,
    /// Biases in the feed-forward network.
    pub ffn_bias: bool,
    /// LayerNorm has a shift β.
    pub norm_bias: bool,
    /// RMSNorm on each head's queries and keys before RoPE (Gemma 3).
    pub qk_norm: bool,
    /// The output head shares the token embedding matrix.
    pub tie_embeddings: bool,
    /// Multiply token embeddings by this (Gemma: √d; the paper: √d too).
    pub embedding_scale: f32,
    /// Sliding-window size for local layers (Gemma 3: 512), if any.
    pub sliding_window: Option<usize>,
    /// With a window: every `n`-th layer is global, the others local (Gemma 3: 6).
    pub global_every: Option<usize>,
    /// Attention scores are scaled by this instead of 1/√head_dim, if set.
    pub attention_scale: Option<f32>,
    /// BERT's pooler: tanh(W_p · h_[CLS] + b_p), one d×d dense layer with bias on the
    /// first token's final state. Part of `BertModel` checkpoints (bert-base-uncased,
    /// all-MiniLM-L6-v2) and of their parameter counts; false for every decoder.
    #[serde(default)]
    pub pooler: bool,
    /// With `qk_norm`: one RMSNorm over all query heads together (h·d_k features, one γ
    /// of that width) and one over all key heads (h_kv·d_k), instead of one per head
    /// (OLMo 2): q ← RMSNorm_{h·d_k}(q) before it is split into heads.
    #[serde(default)]
    pub qk_norm_whole: bool,
    /// Soft-capping of the attention scores (Gemma 2): each scaled score s becomes
    /// c·tanh(s / c) before the mask and the softmax, so no score leaves (−c, c).
    /// Computed as llama.cpp does: s · (1/c), tanh, · c. Needs `attention_scale` on the
    /// queries (the scaled scores are capped; llama.cpp caps Q·Kᵀ before its softmax scale).
    #[serde(default)]
    pub attn_softcap: Option<f32>,
    /// Soft-capping of the output logits (Gemma 2): z ← c·tanh(z / c), computed as
    /// z · (1/c), tanh, · c.
    #[serde(default)]
    pub final_softcap: Option<f32>,
    /// Each sub-layer's output is multiplied by this before the residual sum (Granite's
    /// `residual_scale`): x ← x + s·f(norm(x)).
    #[serde(default)]
    pub residual_scale: Option<f32>,
    /// The logits are divided by this (Granite's `logit_scale`): z ← z · (1/s).
    #[serde(default)]
    pub logit_scale: Option<f32>,
    /// With `attention_scale`: llama.cpp applies it to the scores inside the softmax
    /// (softmax(Q·Kᵀ · s); Granite's `attention.scale`) rather than to the queries before
    /// the product (softmax((s·Q)·Kᵀ); Gemma's `query_pre_attn_scalar`). The same number
    /// but for rounding, which llama.cpp's f16 steps make visible.
    #[serde(default)]
    pub attention_scale_in_softmax: bool,
    /// With RoPE: every n-th layer (layer i when (i + 1) mod n = 0) rotates nothing, its
    /// attention position-free ("NoPE" layers; SmolLM3: n = 4, llama.cpp's rule).
    #[serde(default)]
    pub no_rope_every: Option<usize>,
    /// A Mixture-of-Experts FFN in every layer in place of the one FFN of `d_ff`
    /// (Mixtral, Qwen3-MoE; [`crate::nn::MixtureOfExperts`]): MoE(x) = Σ_j w_j ·
    /// FFN_{E_j}(x) over the top-k of softmax(W_g x). `None`: the dense FFN.
    #[serde(default)]
    pub experts: Option<ExpertsConfig>,
}

/// The shape of a Mixture-of-Experts FFN ([`ModelConfig::experts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertsConfig {
    /// n: the experts of each layer.
    pub n_experts: usize,
    /// k: the experts used per position (1 ≤ k ≤ n).
    pub top_k: usize,
    /// Each expert's hidden width d_ff (Qwen3-MoE: `expert_feed_forward_length`, not
    /// the model's `d_ff`).
    pub d_ff: usize,
    /// Whether the k chosen probabilities are renormalised to sum to 1 (Mixtral and
    /// Qwen3-MoE: yes).
    pub normalize_weights: bool,
}

impl ModelConfig {
    /// Check every constraint the model code relies on. Errors name the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.d_model == 0 {
            return bad("d_model must be > 0".into());
        }
        if self.n_heads == 0 {
            return bad("heads must be > 0".into());
        }
        if self.n_kv_heads == 0 {
            return bad("kv_heads must be > 0".into());
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "heads ({}) must be divisible by kv_heads ({}): each key/value head serves a whole group of query heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.head_dim == 0 {
            return bad("head_dim must be > 0".into());
        }
        if self.vocab_size == 0 {
            return bad("vocab_size must be > 0".into());
        }
        if self.d_ff == 0 {
            return bad("d_ff must be > 0".into());
        }
        if self.max_positions == 0 {
            return bad("max_positions must be > 0".into());
        }
        let (enc, dec) = (self.encoder_layers, self.decoder_layers);
        match self.kind {
            ModelKind::Encoder if enc == 0 || dec != 0 => {
                return bad(format!(
                    "an encoder needs encoder_layers > 0 and decoder_layers = 0 (got {enc}, {dec})"
                ))
            }
            ModelKind::Decoder if dec == 0 || enc != 0 => {
                return bad(format!(
                    "a decoder needs decoder_layers > 0 and encoder_layers = 0 (got {enc}, {dec})"
                ))
            }
            ModelKind::EncoderDecoder if enc == 0 || dec == 0 => {
                return bad(format!(
                "an encoder-decoder needs both stacks (got {enc} encoder, {dec} decoder layers)"
            ))
            }
            _ => {}
        }
        if let PositionKind::Rope {
            base,
            local_base,
            scaling,
            ..
        } = self.position
        {
            if let Err(e) = scaling.check() {
                return bad(format!("position.scaling: {e}"));
            }
            if !self.head_dim.is_multiple_of(2) {
                return bad(format!(
                    "RoPE needs an even head_dim, got {}",
                    self.head_dim
                ));
            }
            let positive = |b: f32| b.is_finite() && b > 0.0;
            if !positive(base) || local_base.is_some_and(|b| !positive(b)) {
                return bad(format!(
                    "rope base must be > 0, got {base} / {local_base:?}"
                ));
            }
        }
        if self.position == PositionKind::Sinusoidal && !self.d_model.is_multiple_of(2) {
            return bad(format!(
                "sinusoidal positions need an even d_model, got {}",
                self.d_model
            ));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return bad(format!("norm_eps must be ≥ 0, got {}", self.norm_eps));
        }
        if self.global_every.is_some() && self.sliding_window.is_none() {
            return bad("global_every is set but sliding_window is not".into());
        }
        if self.sliding_window == Some(0) || self.global_every == Some(0) {
            return bad("sliding_window and global_every must be > 0 when set".into());
        }
        if self.qk_norm_whole && !self.qk_norm {
            return bad("qk_norm_whole is set but qk_norm is not".into());
        }
        let positive = |x: Option<f32>| x.is_none_or(|x| x.is_finite() && x > 0.0);
        for (name, x) in [
            ("attn_softcap", self.attn_softcap),
            ("final_softcap", self.final_softcap),
            ("residual_scale", self.residual_scale),
            ("logit_scale", self.logit_scale),
            ("attention_scale", self.attention_scale),
        ] {
            if !positive(x) {
                return bad(format!(
                    "{name} must be a finite number > 0 when set, got {x:?}"
                ));
            }
        }
        if self.no_rope_every == Some(0) {
            return bad("no_rope_every must be > 0 when set".into());
        }
        if self.no_rope_every.is_some() && !matches!(self.position, PositionKind::Rope { .. }) {
            return bad("no_rope_every is set but the positions are not RoPE".into());
        }
        if let Some(ex) = &self.experts {
            if ex.n_experts == 0 || ex.top_k == 0 || ex.top_k > ex.n_experts {
                return bad(format!(
                    "experts: top_k = {} of n_experts = {}; needs 1 ≤ top_k ≤ n_experts",
                    ex.top_k, ex.n_experts
                ));
            }
            if ex.d_ff == 0 {
                return bad("experts: d_ff must be > 0".into());
            }
            if self.ffn != FfnKind::Gated || self.ffn_bias {
                return bad(
                    "experts: lucent's experts are gated FFNs without biases (ffn = gated, ffn_bias = false)"
                        .into(),
                );
            }
        }
        if self.attention_scale_in_softmax && self.attention_scale.is_none() {
            return bad("attention_scale_in_softmax is set but attention_scale is not".into());
        }
        if self.attn_softcap.is_some()
            && (self.attention_scale.is_none() || self.attention_scale_in_softmax)
        {
            return bad(
                "attn_softcap caps the scaled scores, so it needs attention_scale applied to the \
                 queries (attention_scale set, attention_scale_in_softmax = false), the order \
                 llama.cpp soft-caps in (Gemma 2)"
                    .into(),
            );
        }
        self.check_sizes()
    }

    /// Whether RoPE reads frequency factors from the checkpoint
    /// (`PositionKind::Rope { freq_factors: true, .. }`).
    pub fn rope_freq_factors(&self) -> bool {
        matches!(
            self.position,
            PositionKind::Rope {
                freq_factors: true,
                ..
            }
        )
    }

    /// Every weight matrix's element count must be a number (no product overflows) and
    /// its f32 bytes must fit in an address space: a file that claims absurd widths is
    /// refused here, by field, before anything is allocated for it.
    fn check_sizes(&self) -> Result<()> {
        const MAX_ELEMENTS: u128 = (isize::MAX as u128) / 4;
        let d = self.d_model as u128;
        let products = [
            ("vocab_size", self.vocab_size, "d_model", self.d_model),
            ("heads", self.n_heads, "head_dim", self.head_dim),
            ("kv_heads", self.n_kv_heads, "head_dim", self.head_dim),
            ("d_ff", self.d_ff, "d_model", self.d_model),
            ("max_positions", self.max_positions, "d_model", self.d_model),
            (
                "max_positions",
                self.max_positions,
                "head_dim",
                self.head_dim,
            ),
            (
                "type_vocab_size",
                self.type_vocab_size,
                "d_model",
                self.d_model,
            ),
        ];
        for (a, x, b, y) in products {
            let n = x as u128 * y as u128;
            if n > MAX_ELEMENTS {
                return Err(Error::Config(format!(
                    "{a} ({x}) × {b} ({y}) = {n} elements, more than any memory holds; the file's sizes are corrupt"
                )));
            }
        }
        let q_dim = self.n_heads as u128 * self.head_dim as u128;
        if q_dim * d > MAX_ELEMENTS {
            return Err(Error::Config(format!(
                "heads ({}) × head_dim ({}) × d_model ({}) = {} elements in W_q, more than any memory holds; the file's sizes are corrupt",
                self.n_heads,
                self.head_dim,
                self.d_model,
                q_dim * d
            )));
        }
        Ok(())
    }

    /// A config whose head_dim is d_model / heads, checking divisibility (the usual case).
    pub fn head_dim_for(d_model: usize, n_heads: usize) -> Result<usize> {
        if n_heads == 0 || !d_model.is_multiple_of(n_heads) {
            return Err(Error::Config(format!(
                "d_model ({d_model}) must be divisible by heads ({n_heads}): each head gets d_model / heads features"
            )));
        }
        Ok(d_model / n_heads)
    }

    /// The width of all query heads together (h · d_k).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// The width of all key (or value) heads together (h_kv · d_k).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Whether layer `i` uses a sliding window (a "local" layer), and its size.
    pub fn window_of_layer(&self, i: usize) -> Option<usize> {
        let w = self.sliding_window?;
        match self.global_every {
            Some(n) if (i + 1).is_multiple_of(n) => None,
            _ => Some(w),
        }
    }

    /// The scale applied to Q·Kᵀ.
    pub fn score_scale(&self) -> f32 {
        self.attention_scale
            .unwrap_or_else(|| 1.0 / (self.head_dim as f32).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> ModelConfig {
        ModelConfig {
            family: "test".into(),
            kind: ModelKind::Decoder,
            vocab_size: 10,
            d_model: 8,
            encoder_layers: 0,
            decoder_layers: 1,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 4,
            d_ff: 16,
            max_positions: 16,
            type_vocab_size: 0,
            position: PositionKind::Learned,
            norm: NormKind::LayerNorm,
            norm_placement: NormPlacement::Pre,
            norm_eps: 1e-5,
            embedding_norm: false,
            final_norm: true,
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

    #[test]
    fn errors_name_the_field() {
        assert!(tiny().validate().is_ok());
        let mut c = tiny();
        c.n_kv_heads = 3;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("kv_heads (3)"), "{e}");
        let e = ModelConfig::head_dim_for(10, 3).unwrap_err().to_string();
        assert!(e.contains("d_model (10)") && e.contains("heads (3)"), "{e}");
    }

    #[test]
    fn the_decoder_extras_are_checked_by_name() {
        let refused = |edit: &dyn Fn(&mut ModelConfig), field: &str| {
            let mut c = tiny();
            edit(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        };
        refused(&|c| c.qk_norm_whole = true, "qk_norm_whole");
        refused(&|c| c.attn_softcap = Some(0.0), "attn_softcap");
        refused(&|c| c.attn_softcap = Some(50.0), "attn_softcap"); // no attention_scale
        refused(&|c| c.final_softcap = Some(f32::NAN), "final_softcap");
        refused(&|c| c.residual_scale = Some(-1.0), "residual_scale");
        refused(&|c| c.logit_scale = Some(0.0), "logit_scale");
        refused(
            &|c| c.attention_scale_in_softmax = true,
            "attention_scale_in_softmax",
        );
        refused(&|c| c.no_rope_every = Some(4), "no_rope_every"); // learned positions
        refused(
            &|c| {
                c.attn_softcap = Some(50.0);
                c.attention_scale = Some(0.5);
                c.attention_scale_in_softmax = true;
            },
            "attn_softcap",
        );
        let mut c = tiny();
        c.attn_softcap = Some(50.0);
        c.attention_scale = Some(0.25);
        c.final_softcap = Some(30.0);
        c.residual_scale = Some(0.22);
        c.logit_scale = Some(8.0);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn gemma_style_windows() {
        let mut c = tiny();
        c.sliding_window = Some(512);
        c.global_every = Some(6);
        let local: Vec<bool> = (0..12).map(|i| c.window_of_layer(i).is_some()).collect();
        assert_eq!(local.iter().filter(|l| !**l).count(), 2);
        assert!(!local[5] && !local[11]);
    }
}
