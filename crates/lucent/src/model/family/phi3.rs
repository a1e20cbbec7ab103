//! Phi-3 and Phi-4-mini (`general.architecture = phi3`): a config translation from GGUF
//! metadata and a name table.
//!
//! LLaMA's decoder (RMSNorm pre-norm, SwiGLU, grouped-query attention, rotate-half RoPE:
//! llama.cpp's NEOX mode) with two differences of storage and one of order:
//!
//! - **fused Q, K and V**: one `blk.{i}.attn_qkv.weight` of (h·d_k + 2·h_kv·d_k, d) rows,
//!   W_q's rows, then W_k's, then W_v's (llama.cpp's `build_qkv` views the product at
//!   those offsets);
//! - **fused gate and up**: one `blk.{i}.ffn_up.weight` of (2·d_ff, d) rows, the gate's
//!   rows first and the up projection's second (llama.cpp's `ggml_swiglu` of the
//!   product: SiLU of the first half times the second half);
//! - Q is scaled by 1/√d_k after RoPE and before the product with K (llama.cpp's
//!   `ggml_scale`, then a score scale of 1): [`ModelConfig::attention_scale`] applied to
//!   the queries.
//!
//! The fused matrices are split at load into row ranges of the one mapped tensor (a
//! quantised matrix's rows are whole blocks, so the split needs no copy): the name
//! table lists each role under the fused key, in row order ([`NameTable::stacked`]),
//! and the generic decoder sees separate matrices.
//!
//! llama.cpp reads `phi3.attention.sliding_window` and then switches Phi's sliding
//! window off (all layers attend to the whole context); lucent does the same. The
//! long-context files' LongRoPE (`rope_factors_long.weight`, `rope_factors_short.weight`,
//! `phi3.rope.scaling.*`) is refused by name.

use super::llama::{check_full_rope, GgufHparams};
use super::{NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::ModelConfig;
use crate::{Error, Result};

/// LongRoPE's per-frequency factor tensors, which lucent does not implement.
const LONGROPE_TENSORS: &[&str] = &["rope_factors_long.weight", "rope_factors_short.weight"];

/// Translate a `phi3` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let hp = GgufHparams::read(f, "phi3")?;
    for name in LONGROPE_TENSORS {
        if f.tensor_info(name).is_some() {
            return Err(Error::Config(format!(
                "{}: tensor {name} sets Phi-3's LongRoPE frequency factors, which lucent does \
                 not implement; it refuses the file rather than compute something else",
                f.path().display()
            )));
        }
    }
    let mut cfg = hp.base_config("phi3", f); // rotate-half RoPE
    check_full_rope(f, "phi3", cfg.head_dim)?;
    // ggml_scale(Q, 1.0f / sqrtf(d_k)) after RoPE; the scores are not scaled again.
    cfg.attention_scale = Some(1.0 / (cfg.head_dim as f32).sqrt());
    cfg.attention_scale_in_softmax = false;
    cfg.validate()?;
    Ok(cfg)
}

/// Every Phi-3 parameter's GGUF tensor name (`{i}` = layer); roles under one key are
/// row ranges of a fused matrix, in this order.
pub const NAMES: NameTable = NameTable {
    family: "phi3",
    prefixes: &[""],
    keys: &[
        (Param::TokenEmbedding, "token_embd.weight"),
        (Param::QueryWeight, "blk.{i}.attn_qkv.weight"),
        (Param::KeyWeight, "blk.{i}.attn_qkv.weight"),
        (Param::ValueWeight, "blk.{i}.attn_qkv.weight"),
        (Param::AttnOutWeight, "blk.{i}.attn_output.weight"),
        (Param::AttnNormWeight, "blk.{i}.attn_norm.weight"),
        (Param::FfnGateWeight, "blk.{i}.ffn_up.weight"),
        (Param::FfnUpWeight, "blk.{i}.ffn_up.weight"),
        (Param::FfnDownWeight, "blk.{i}.ffn_down.weight"),
        (Param::FfnNormWeight, "blk.{i}.ffn_norm.weight"),
        (Param::FinalNormWeight, "output_norm.weight"),
        (Param::OutputWeight, "output.weight"),
    ],
};
