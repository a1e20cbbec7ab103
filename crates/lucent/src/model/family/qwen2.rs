//! Qwen 2 and 2.5 (`general.architecture = qwen2`): a config translation from GGUF
//! metadata and a name table.
//!
//! LLaMA's decoder (RMSNorm pre-norm, SwiGLU, grouped-query attention, RoPE) with two
//! differences, both general options of the components:
//!
//! - biases on the Q, K and V projections ([`ModelConfig::qkv_bias`]), added after each
//!   product and before RoPE, as llama.cpp does;
//! - rotate-half RoPE (llama.cpp's NEOX mode: unlike `llama`, Qwen's converter does not
//!   permute the rows of W_Q and W_K, so feature i turns with feature i + d_k/2).
//!
//! The head is tied to the token table when the file has no `output.weight`.
//!
//! RoPE scaling (`qwen2.rope.scaling.type` = `linear` or `yarn`, Qwen's long-context
//! setting, with `.factor` and `.original_context_length`) is read as llama.cpp reads
//! it (`read_rope_scaling` in `llama.rs`); other types are refused naming the key.

use super::llama::{check_full_rope, GgufHparams, ROPE_SCALING_KEYS};
use super::{NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::ModelConfig;
use crate::Result;

/// Translate a `qwen2` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let hp = GgufHparams::read_honouring(f, "qwen2", ROPE_SCALING_KEYS)?; // linear, YaRN
    let mut cfg = hp.base_config("qwen2", f); // rotate-half RoPE
    cfg.qkv_bias = true;
    check_full_rope(f, "qwen2", cfg.head_dim)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Every Qwen 2 parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "qwen2",
    prefixes: &[""],
    keys: &[
        (Param::TokenEmbedding, "token_embd.weight"),
        (Param::QueryWeight, "blk.{i}.attn_q.weight"),
        (Param::QueryBias, "blk.{i}.attn_q.bias"),
        (Param::KeyWeight, "blk.{i}.attn_k.weight"),
        (Param::KeyBias, "blk.{i}.attn_k.bias"),
        (Param::ValueWeight, "blk.{i}.attn_v.weight"),
        (Param::ValueBias, "blk.{i}.attn_v.bias"),
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
