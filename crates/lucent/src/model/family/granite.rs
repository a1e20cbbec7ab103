//! Granite 3 (`general.architecture = granite`, the dense models): a config translation
//! from GGUF metadata and a name table.
//!
//! LLaMA's decoder (RMSNorm pre-norm, SwiGLU, grouped-query attention, interleaved RoPE
//! over GGUF's permuted rows, see [`super::llama`]) with four multipliers, each a
//! general option of the components and each computed where llama.cpp computes it:
//!
//! - `granite.embedding_scale` m_e: x = E[ids] · m_e ([`ModelConfig::embedding_scale`]);
//! - `granite.residual_scale` m_r: x ← x + m_r·f(norm(x)) around attention and FFN
//!   ([`ModelConfig::residual_scale`]);
//! - `granite.attention.scale` m_a: softmax(Q·Kᵀ · m_a) instead of 1/√d_k, the scale
//!   inside the softmax ([`ModelConfig::attention_scale_in_softmax`]);
//! - `granite.logit_scale` m_l: logits ← logits · (1/m_l) ([`ModelConfig::logit_scale`]).
//!
//! A multiplier of 0 (or an absent optional key) means none, as in llama.cpp. A file
//! with RoPE switched off (`granite.rope.scaling.finetuned` = false) or with experts
//! (`granite.expert_count`) is refused by name.

use super::llama::{check_full_rope, GgufHparams};
use super::{NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::{ModelConfig, PositionKind};
use crate::ops::{RopeConvention, RopeScaling};
use crate::{Error, Result};

/// Translate a `granite` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    if f.opt_bool("granite.rope.scaling.finetuned")? == Some(false) {
        return Err(Error::Config(format!(
            "{}: granite.rope.scaling.finetuned = false switches RoPE off, which lucent does not implement \
             for granite; it refuses the file rather than compute something else",
            f.path().display()
        )));
    }
    let hp = GgufHparams::read(f, "granite")?;
    let mut cfg = hp.base_config("granite", f);
    // GGUF rows are permuted for the interleaved rotation (see `llama`).
    cfg.position = PositionKind::Rope {
        base: hp.rope_base,
        local_base: None,
        convention: RopeConvention::Interleaved,
        scaling: RopeScaling::None,
        freq_factors: false,
    };
    let nonzero = |x: Option<f32>| x.filter(|x| *x != 0.0);
    if let Some(m) = nonzero(f.opt_f32("granite.embedding_scale")?) {
        cfg.embedding_scale = m;
    }
    cfg.residual_scale = nonzero(f.opt_f32("granite.residual_scale")?);
    cfg.attention_scale = nonzero(f.opt_f32("granite.attention.scale")?);
    cfg.attention_scale_in_softmax = cfg.attention_scale.is_some();
    cfg.logit_scale = Some(f.get_f32("granite.logit_scale")?);
    check_full_rope(f, "granite", cfg.head_dim)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Every Granite parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "granite",
    prefixes: &[""],
    keys: &[
        (Param::TokenEmbedding, "token_embd.weight"),
        (Param::QueryWeight, "blk.{i}.attn_q.weight"),
        (Param::KeyWeight, "blk.{i}.attn_k.weight"),
        (Param::ValueWeight, "blk.{i}.attn_v.weight"),
        (Param::AttnOutWeight, "blk.{i}.attn_output.weight"),
        (Param::AttnNormWeight, "blk.{i}.attn_norm.weight"),
        (Param::FfnGateWeight, "blk.{i}.ffn_gate.weight"),
        (Param::FfnUpWeight, "blk.{i}.ffn_up.weight"),
        (Param::FfnDownWeight, "blk.{i}.ffn_down.weight"),
        (Param::FfnNormWeight, "blk.{i}.ffn_norm.weight"),
        (Param::FinalNormWeight, "output_norm.weight"),
        (Param::OutputWeight, "output.weight"),
    ],
};
