//! Gemma 2 (`general.architecture = gemma2`): a config translation from GGUF metadata
//! and a name table. Gemma 2's ideas are general options of the components:
//!
//! - embeddings multiplied by √d ([`ModelConfig::embedding_scale`]);
//! - sandwich norms: x ← x + post_norm(f(pre_norm(x))) around attention and FFN;
//! - soft-capping of the attention scores, s ← c·tanh(s / c) with c =
//!   `gemma2.attn_logit_softcapping` (llama.cpp's default 50 when the key is absent)
//!   ([`ModelConfig::attn_softcap`]), and of the output logits with
//!   `gemma2.final_logit_softcapping` (default 30) ([`ModelConfig::final_softcap`]);
//! - alternating layers: local ones with a sliding window of
//!   `gemma2.attention.sliding_window` positions (default 4096), every
//!   `gemma2.attention.sliding_window_pattern`-th (default 2nd) layer global, as llama.cpp
//!   lays them out; the local layers' RoPE base is `gemma2.rope.freq_base_swa` when
//!   the file sets it, else the global one;
//! - queries scaled by 1/√query_pre_attn_scalar before the product: the head width for
//!   every size but 27B (46 layers), where it is d / h (llama.cpp's rule; the GGUF does
//!   not store it);
//! - GeGLU with tanh-GELU; rotate-half RoPE (llama.cpp's NEOX mode); a head tied to the
//!   token table (llama.cpp reads no `output.weight` for Gemma 2).
//!
//! As for Gemma 3, llama.cpp's converter stores the norms' γ = 1 + w, used as they are.

use super::llama::GgufHparams;
use super::{NameTable, Param};
use crate::io::gguf::{GgufFile, GgufValue};
use crate::model::{ModelConfig, NormPlacement, PositionKind};
use crate::ops::{Activation, RopeConvention, RopeScaling};
use crate::{Error, Result};

/// llama.cpp's soft-cap of the attention scores when the file does not set one.
pub const DEFAULT_ATTN_SOFTCAP: f32 = 50.0;
/// llama.cpp's soft-cap of the logits when the file does not set one.
pub const DEFAULT_FINAL_SOFTCAP: f32 = 30.0;
/// llama.cpp's window when the file does not set one.
pub const DEFAULT_WINDOW: usize = 4096;
/// Every n-th layer is global when the file does not say (llama.cpp's default).
pub const DEFAULT_GLOBAL_EVERY: usize = 2;

/// Translate a `gemma2` GGUF's metadata into the generic [`ModelConfig`] (validated).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let hp = GgufHparams::read_honouring(
        f,
        "gemma2",
        &["attn_logit_softcapping", "final_logit_softcapping"],
    )?;
    let mut cfg = hp.base_config("gemma2", f);
    cfg.position = PositionKind::Rope {
        base: hp.rope_base,
        local_base: f.opt_f32("gemma2.rope.freq_base_swa")?,
        convention: RopeConvention::RotateHalf,
        scaling: RopeScaling::None,
        freq_factors: false,
    };
    cfg.norm_placement = NormPlacement::Sandwich;
    cfg.activation = Activation::GeluTanh;
    cfg.embedding_scale = (hp.d_model as f32).sqrt();
    cfg.attn_softcap = Some(
        f.opt_f32("gemma2.attn_logit_softcapping")?
            .unwrap_or(DEFAULT_ATTN_SOFTCAP),
    );
    cfg.final_softcap = Some(
        f.opt_f32("gemma2.final_logit_softcapping")?
            .unwrap_or(DEFAULT_FINAL_SOFTCAP),
    );
    cfg.sliding_window = Some(
        f.opt_u32("gemma2.attention.sliding_window")?
            .map_or(DEFAULT_WINDOW, |w| w as usize),
    );
    cfg.global_every = global_every(f)?;
    let query_pre_attn_scalar = if hp.layers == 46 {
        (hp.d_model / hp.n_heads) as f32 // 27B
    } else {
        hp.head_dim as f32
    };
    cfg.attention_scale = Some(1.0 / query_pre_attn_scalar.sqrt());
    cfg.validate()?;
    Ok(cfg)
}

/// Which layers are global: `gemma2.attention.sliding_window_pattern` = n makes every
/// n-th layer global (layer i is local when i mod n < n − 1; n = 0: every layer local);
/// a per-layer array is refused naming the key.
fn global_every(f: &GgufFile) -> Result<Option<usize>> {
    let key = "gemma2.attention.sliding_window_pattern";
    let n = match f.metadata().iter().find(|(k, _)| k == key) {
        None => DEFAULT_GLOBAL_EVERY,
        Some((_, GgufValue::U32(n))) => *n as usize,
        Some((_, GgufValue::I32(n))) if *n >= 0 => *n as usize,
        Some((_, v)) => {
            return Err(Error::Config(format!(
                "{}: {key} = {} is not a layer count; lucent reads a whole number n (every n-th layer global), \
                 not a per-layer list",
                f.path().display(),
                v.describe()
            )))
        }
    };
    Ok((n > 0).then_some(n))
}

/// Every Gemma 2 parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "gemma2",
    prefixes: &[""],
    keys: &[
        (Param::TokenEmbedding, "token_embd.weight"),
        (Param::QueryWeight, "blk.{i}.attn_q.weight"),
        (Param::KeyWeight, "blk.{i}.attn_k.weight"),
        (Param::ValueWeight, "blk.{i}.attn_v.weight"),
        (Param::AttnOutWeight, "blk.{i}.attn_output.weight"),
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
    ],
};
