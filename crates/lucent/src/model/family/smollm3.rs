//! SmolLM3 (`general.architecture = smollm3`): a config translation from GGUF metadata
//! and a name table.
//!
//! LLaMA's decoder (RMSNorm pre-norm, SwiGLU, grouped-query attention, interleaved RoPE
//! over GGUF's permuted rows, see [`super::llama`]) with "NoPE" layers: every 4th layer
//! (layers 3, 7, 11, …) rotates nothing, its attention position-free
//! ([`ModelConfig::no_rope_every`]). llama.cpp fixes the 4 for this architecture; the
//! GGUF does not store it.

use super::llama::{check_full_rope, GgufHparams};
use super::{NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::{ModelConfig, PositionKind};
use crate::ops::{RopeConvention, RopeScaling};
use crate::Result;

/// Every n-th layer has no RoPE (llama.cpp's `n_no_rope_layer_step` for SmolLM3).
pub const NO_ROPE_EVERY: usize = 4;

/// Translate a `smollm3` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let hp = GgufHparams::read(f, "smollm3")?;
    let mut cfg = hp.base_config("smollm3", f);
    // GGUF rows are permuted for the interleaved rotation (see `llama`).
    cfg.position = PositionKind::Rope {
        base: hp.rope_base,
        local_base: None,
        convention: RopeConvention::Interleaved,
        scaling: RopeScaling::None,
        freq_factors: false,
    };
    cfg.no_rope_every = Some(NO_ROPE_EVERY);
    check_full_rope(f, "smollm3", cfg.head_dim)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Every SmolLM3 parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "smollm3",
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
