//! OLMo 2 (`general.architecture = olmo2`): a config translation from GGUF metadata and
//! a name table. Its ideas are general options of the components:
//!
//! - norms on the sub-layers' outputs instead of their inputs:
//!   x ← x + norm(f(x)) around attention and FFN ([`NormPlacement::OnOutput`]), with
//!   the file's `post_attention_norm` and `post_ffw_norm`, and a final norm;
//! - QK-norm over the whole query and key vectors, before they are split into heads:
//!   q ← RMSNorm(q) over all h·d_k features, k over all h_kv·d_k
//!   ([`ModelConfig::qk_norm_whole`]);
//! - rotate-half RoPE (llama.cpp's NEOX mode), SwiGLU, no biases.
//!
//! OLMo 3's sliding-window layers (`olmo2.attention.sliding_window`) are refused by
//! name.

use super::llama::{check_full_rope, refuse_keys, GgufHparams};
use super::{NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::{ModelConfig, NormPlacement};
use crate::Result;

/// OLMo 2 metadata keys lucent does not implement (besides every GGUF decoder's).
const UNSUPPORTED_KEYS: &[(&str, &str)] =
    &[("attention.sliding_window", "sliding-window layers (OLMo 3)")];

/// Translate an `olmo2` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    refuse_keys(f, "olmo2", UNSUPPORTED_KEYS, &[])?;
    let hp = GgufHparams::read(f, "olmo2")?;
    let mut cfg = hp.base_config("olmo2", f); // rotate-half RoPE
    cfg.norm_placement = NormPlacement::OnOutput;
    cfg.qk_norm = true;
    cfg.qk_norm_whole = true;
    check_full_rope(f, "olmo2", cfg.head_dim)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Every OLMo 2 parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "olmo2",
    prefixes: &[""],
    keys: &[
        (Param::TokenEmbedding, "token_embd.weight"),
        (Param::QueryWeight, "blk.{i}.attn_q.weight"),
        (Param::KeyWeight, "blk.{i}.attn_k.weight"),
        (Param::ValueWeight, "blk.{i}.attn_v.weight"),
        (Param::AttnOutWeight, "blk.{i}.attn_output.weight"),
        (Param::QueryNormWeight, "blk.{i}.attn_q_norm.weight"),
        (Param::KeyNormWeight, "blk.{i}.attn_k_norm.weight"),
        (
            Param::AttnPostNormWeight,
            "blk.{i}.post_attention_norm.weight",
        ),
        (Param::FfnGateWeight, "blk.{i}.ffn_gate.weight"),
        (Param::FfnUpWeight, "blk.{i}.ffn_up.weight"),
        (Param::FfnDownWeight, "blk.{i}.ffn_down.weight"),
        (Param::FfnPostNormWeight, "blk.{i}.post_ffw_norm.weight"),
        (Param::FinalNormWeight, "output_norm.weight"),
        (Param::OutputWeight, "output.weight"),
    ],
};
