//! Gemma 3 (`general.architecture = gemma3`): a config translation from GGUF metadata and
//! a name table. Gemma's ideas are general options of the components:
//!
//! - embeddings multiplied by √d ([`ModelConfig::embedding_scale`]);
//! - sandwich norms: x ← x + post_norm(f(pre_norm(x))) around attention and FFN;
//! - QK-norm: RMSNorm over each head's queries and keys before RoPE;
//! - GeGLU with tanh-GELU; RMSNorm with ε from the file;
//! - local layers with a sliding window (`attention.sliding_window`, 512) and RoPE base
//!   10 000, every 6th layer global (layers 5, 11, 17) with `rope.freq_base` (1 000 000);
//! - rotate-half RoPE (llama.cpp's NEOX mode: Gemma's rows are not permuted);
//! - attention scale 1/√query_pre_attn_scalar: the head dim (256 → 1/16) for every size
//!   but 27B, where it is 1/√(d/h) (llama.cpp's rule; the GGUF does not store it);
//! - no final logit soft-capping (Gemma 2 had it; Gemma 3 replaced it with QK-norm).
//!
//! Gemma's checkpoints store RMSNorm weights as w with γ = 1 + w; llama.cpp's converter
//! adds the 1 when it writes the GGUF, so the GGUF's norm weights are γ itself (they are
//! used as they are; `tests/decoders.rs` checks them against llama.cpp's output).

use super::llama::GgufHparams;
use super::{GgufWeights, NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::{ModelConfig, NormPlacement, PositionKind};
use crate::ops::{Activation, RopeConvention, RopeScaling};
use crate::Result;

/// RoPE base of the local (sliding-window) layers; llama.cpp fixes it for Gemma 3.
pub const LOCAL_ROPE_BASE: f32 = 10_000.0;
/// Every n-th layer is global; the rest are local (llama.cpp's pattern for Gemma 3).
pub const GLOBAL_EVERY: usize = 6;

/// Translate a `gemma3` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let hp = GgufHparams::read(f, "gemma3")?;
    let mut cfg = hp.base_config("gemma3", f);
    cfg.position = PositionKind::Rope {
        base: hp.rope_base,
        local_base: Some(LOCAL_ROPE_BASE),
        convention: RopeConvention::RotateHalf,
        scaling: RopeScaling::None,
        freq_factors: false,
    };
    cfg.norm_placement = NormPlacement::Sandwich;
    cfg.activation = Activation::GeluTanh;
    cfg.qk_norm = true;
    cfg.embedding_scale = (hp.d_model as f32).sqrt();
    cfg.sliding_window = f
        .opt_u32("gemma3.attention.sliding_window")?
        .map(|w| w as usize);
    cfg.global_every = Some(GLOBAL_EVERY);
    let query_pre_attn_scalar = if hp.layers == 62 {
        (hp.d_model / hp.n_heads) as f32 // 27B
    } else {
        hp.head_dim as f32
    };
    cfg.attention_scale = Some(1.0 / query_pre_attn_scalar.sqrt());
    cfg.validate()?;
    Ok(cfg)
}

/// Every Gemma 3 parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "gemma3",
    prefixes: &[""],
    keys: &[
        (Param::TokenEmbedding, "token_embd.weight"),
        (Param::QueryWeight, "blk.{i}.attn_q.weight"),
        (Param::KeyWeight, "blk.{i}.attn_k.weight"),
        (Param::ValueWeight, "blk.{i}.attn_v.weight"),
        (Param::AttnOutWeight, "blk.{i}.attn_output.weight"),
        (Param::QueryNormWeight, "blk.{i}.attn_q_norm.weight"),
        (Param::KeyNormWeight, "blk.{i}.attn_k_norm.weight"),
        (Param::AttnNormWeight, "blk.{i}.attn_norm.weight"),
        (
            Param::AttnPostNormWeight,
            "blk.{i}.post_attention_norm.weight",
        ),
        (Param::FfnGateWeight, "blk.{i}.ffn_gate.weight"),
        (Param::FfnUpWeight, "blk.{i}.ffn_up.weight"),
        (Param::FfnDownWeight, "blk.{i}.ffn_down.weight"),
        (Param::FfnNormWeight, "blk.{i}.ffn_norm.weight"),
        (Param::FfnPostNormWeight, "blk.{i}.post_ffw_norm.weight"),
        (Param::FinalNormWeight, "output_norm.weight"),
        (Param::OutputWeight, "output.weight"),
    ],
};

/// The weights of a `gemma3` file (its name table over `f`, shapes from `cfg`).
pub fn weights<'a>(f: &'a GgufFile, cfg: &'a ModelConfig) -> GgufWeights<'a> {
    GgufWeights::new(f, &NAMES, cfg)
}
