//! Qwen 3 MoE (`general.architecture = qwen3moe`: Qwen3-30B-A3B, Qwen3-235B-A22B): a
//! config translation from GGUF metadata and a name table.
//!
//! Qwen 3's decoder ([`super::qwen3`]: per-head QK-norm, rotate-half RoPE) with a
//! mixture of experts ([`crate::nn::MixtureOfExperts`]) in every layer in place of the
//! dense FFN: `qwen3moe.expert_count` experts (n > 0, as llama.cpp requires),
//! `qwen3moe.expert_used_count` of them per token (k), each a SwiGLU FFN of width
//! `qwen3moe.expert_feed_forward_length` (llama.cpp's default when absent:
//! `feed_forward_length / k`); the router's softmax over all n, the top k, their
//! probabilities renormalised (llama.cpp does so for this architecture whatever
//! `expert_weights_norm` says; a file that sets it to false is refused). Tensors: the
//! router `blk.{i}.ffn_gate_inp.weight` (n, d) and the experts stacked,
//! `ffn_gate_exps`/`ffn_up_exps` (n, d_ff, d), `ffn_down_exps` (n, d, d_ff).
//!
//! Refused by key: shared experts, expert groups, another gating function, a weight
//! scale ([`super::llama::read_experts`]), and the keys every GGUF decoder refuses.

use super::llama::{check_full_rope, read_experts, GgufHparams};
use super::{NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::ModelConfig;
use crate::{Error, Result};

/// Translate a `qwen3moe` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let experts = read_experts(f, "qwen3moe", |k| {
        Ok(f.get_usize("qwen3moe.feed_forward_length")? / k)
    })?;
    let hp = GgufHparams::read_honouring(f, "qwen3moe", &["expert_count"])?;
    let mut cfg = hp.base_config("qwen3moe", f); // rotate-half RoPE
    cfg.qk_norm = true;
    cfg.experts = experts;
    if cfg.experts.is_none() {
        return Err(Error::Config(format!(
            "{}: qwen3moe.expert_count is missing or 0; a qwen3moe file needs experts (a dense Qwen 3 is `qwen3`)",
            f.path().display()
        )));
    }
    check_full_rope(f, "qwen3moe", cfg.head_dim)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Every Qwen 3 MoE parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "qwen3moe",
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
        (Param::FfnRouterWeight, "blk.{i}.ffn_gate_inp.weight"),
        (Param::FfnGateExpsWeight, "blk.{i}.ffn_gate_exps.weight"),
        (Param::FfnUpExpsWeight, "blk.{i}.ffn_up_exps.weight"),
        (Param::FfnDownExpsWeight, "blk.{i}.ffn_down_exps.weight"),
        (Param::FfnNormWeight, "blk.{i}.ffn_norm.weight"),
        (Param::FinalNormWeight, "output_norm.weight"),
        (Param::OutputWeight, "output.weight"),
    ],
};
