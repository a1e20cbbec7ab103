//! Qwen 3 (`general.architecture = qwen3`, the dense models): a config translation from
//! GGUF metadata and a name table.
//!
//! LLaMA's decoder with, as general options of the components:
//!
//! - QK-norm ([`ModelConfig::qk_norm`]): RMSNorm over each head's queries and keys (one
//!   γ of d_k features for all query heads, one for all key heads), after the
//!   projections and before RoPE;
//! - rotate-half RoPE (llama.cpp's NEOX mode; the rows of W_Q and W_K are not permuted);
//! - no biases; heads may be wider than d / h (`qwen3.attention.key_length`).
//!
//! RoPE scaling (`qwen3.rope.scaling.type` = `linear` or `yarn`, Qwen's long-context
//! setting, with `.factor` and `.original_context_length`) is read as llama.cpp reads
//! it (`read_rope_scaling` in `llama.rs`); other types are refused naming the key.

use super::llama::{check_full_rope, GgufHparams, ROPE_SCALING_KEYS};
use super::{NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::ModelConfig;
use crate::Result;

/// Translate a `qwen3` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let hp = GgufHparams::read_honouring(f, "qwen3", ROPE_SCALING_KEYS)?; // linear, YaRN
    let mut cfg = hp.base_config("qwen3", f); // rotate-half RoPE
    cfg.qk_norm = true;
    check_full_rope(f, "qwen3", cfg.head_dim)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Every Qwen 3 parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "qwen3",
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
        (Param::FfnGateWeight, "blk.{i}.ffn_gate.weight"),
        (Param::FfnUpWeight, "blk.{i}.ffn_up.weight"),
        (Param::FfnDownWeight, "blk.{i}.ffn_down.weight"),
        (Param::FfnNormWeight, "blk.{i}.ffn_norm.weight"),
        (Param::FinalNormWeight, "output_norm.weight"),
        (Param::OutputWeight, "output.weight"),
    ],
};
