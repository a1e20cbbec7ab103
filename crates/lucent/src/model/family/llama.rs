//! LLaMA (SmolLM2 and every `general.architecture = llama` GGUF): a config translation
//! from GGUF metadata and a name table.
//!
//! LLaMA is the generic decoder with RMSNorm in pre-norm placement, a final norm,
//! SwiGLU feed-forward (SiLU-gated), RoPE, grouped-query attention, no biases, and a head
//! tied to the token embedding when the file has no `output.weight`.
//!
//! # GGUF's row order of W_Q and W_K for RoPE (the one place it is handled)
//!
//! Hugging Face LLaMA checkpoints rotate feature i with feature i + d_k/2 of each head
//! (`rotate_half`). llama.cpp's converter permutes the rows of W_Q and W_K within each
//! head so that the same rotation pairs *adjacent* features (2i, 2i + 1) — the paper's
//! interleaved form, which llama.cpp applies to the `llama` architecture (its "normal"
//! RoPE mode). The permutation sends HF row `i` of a head to row `2i` and row `i + d_k/2`
//! to row `2i + 1`, and leaves V, O and everything else alone. So lucent keeps GGUF's
//! rows as they are (no copy, quantised blocks untouched) and runs RoPE with
//! [`RopeConvention::Interleaved`]: q·k is then exactly the HF model's. A `llama` model
//! read from safetensors would use [`RopeConvention::RotateHalf`] with its own rows.
//!
//! # RoPE scaling
//!
//! `llama.rope.scaling.*` (linear, YaRN: [`read_rope_scaling`]) and Llama 3.1/3.2's
//! frequency bands, which GGUF carries as one `rope_freqs.weight` tensor of d_k/2
//! divisors of θᵢ (llama.cpp's `freq_factors`, shared by every layer), are read into the
//! config's position ([`PositionKind::Rope`]'s `scaling` and `freq_factors`); the
//! formulas are in [`crate::ops::rope`].

use super::{GgufWeights, NameTable, Param};
use crate::io::gguf::GgufFile;
use crate::model::{
    ExpertsConfig, FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind,
};
use crate::ops::{Activation, RopeConvention, RopeScaling};
use crate::{Error, Result};

/// The metadata every GGUF decoder shares, read under `{arch}.`; errors name the key.
pub(crate) struct GgufHparams {
    pub vocab_size: usize,
    pub d_model: usize,
    pub layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub d_ff: usize,
    pub context: usize,
    pub rope_base: f32,
    /// The RoPE scaling, when the family honours [`ROPE_SCALING_KEYS`] (else none: the
    /// keys are refused).
    pub rope_scaling: RopeScaling,
    pub eps: f32,
}

impl GgufHparams {
    /// Read `{arch}.block_count`, `embedding_length`, `feed_forward_length`,
    /// `attention.head_count(_kv)`, `attention.key_length`, `rope.freq_base`,
    /// `attention.layer_norm_rms_epsilon`, `context_length`; the vocabulary size from
    /// `{arch}.vocab_size` or the token list. A key of [`UNSUPPORTED_KEYS`] is refused.
    pub fn read(f: &GgufFile, arch: &str) -> Result<GgufHparams> {
        GgufHparams::read_honouring(f, arch, &[])
    }

    /// [`GgufHparams::read`] for a family that implements some of [`UNSUPPORTED_KEYS`]
    /// itself (`honoured`, e.g. Gemma 2's soft-capping keys): those are not refused. A
    /// family that honours [`ROPE_SCALING_KEYS`] gets them read into `rope_scaling`
    /// ([`read_rope_scaling`]); one that honours [`ROPE_FREQS_TENSOR`] may hold that
    /// tensor.
    pub fn read_honouring(f: &GgufFile, arch: &str, honoured: &[&str]) -> Result<GgufHparams> {
        refuse_unsupported_keys(f, arch, honoured)?;
        let k = |s: &str| format!("{arch}.{s}");
        // The scaling first: a refused one is refused before the tensors are looked at.
        let rope_scaling = if ROPE_SCALING_KEYS.iter().all(|k| honoured.contains(k)) {
            read_rope_scaling(f, arch)?
        } else {
            RopeScaling::None
        };
        let d_model = f.get_usize(&k("embedding_length"))?;
        let n_heads = f.get_usize(&k("attention.head_count"))?;
        let n_kv_heads = match f.opt_u32(&k("attention.head_count_kv"))? {
            Some(n) => n as usize,
            None => n_heads,
        };
        let head_dim = match f.opt_u32(&k("attention.key_length"))? {
            Some(n) => n as usize,
            None => ModelConfig::head_dim_for(d_model, n_heads)?,
        };
        let vocab_size = match f.opt_u32(&k("vocab_size"))? {
            Some(n) => n as usize,
            None => f
                .get_array("tokenizer.ggml.tokens")
                .map(|a| a.len())
                .or_else(|_| {
                    f.tensor_info("token_embd.weight")
                        .map(|t| t.shape[0])
                        .ok_or_else(|| Error::Weights(format!(
                            "{}: no {arch}.vocab_size, no tokenizer.ggml.tokens and no token_embd.weight",
                            f.path().display()
                        )))
                })?,
        };
        let layers = f.get_usize(&k("block_count"))?;
        let tensors = f.tensor_infos().len();
        if layers > tensors {
            return Err(Error::format(
                f.path(),
                format!(
                    "{arch}.block_count = {layers}, but the file holds only {tensors} tensors; \
                     every layer needs tensors of its own, so the file is corrupt"
                ),
            ));
        }
        Ok(GgufHparams {
            rope_scaling,
            vocab_size,
            d_model,
            layers,
            n_heads,
            n_kv_heads,
            head_dim,
            d_ff: f.get_usize(&k("feed_forward_length"))?,
            context: f.get_usize(&k("context_length"))?,
            rope_base: f.opt_f32(&k("rope.freq_base"))?.unwrap_or(10_000.0),
            eps: f.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
        })
    }

    /// The parts of a [`ModelConfig`] every GGUF decoder shares (RMSNorm, gated FFN, RoPE
    /// at `rope_base`, no biases, a final norm); the family sets the rest.
    pub fn base_config(&self, family: &str, f: &GgufFile) -> ModelConfig {
        ModelConfig {
            family: family.into(),
            kind: ModelKind::Decoder,
            vocab_size: self.vocab_size,
            d_model: self.d_model,
            encoder_layers: 0,
            decoder_layers: self.layers,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            d_ff: self.d_ff,
            max_positions: self.context,
            type_vocab_size: 0,
            position: PositionKind::Rope {
                base: self.rope_base,
                local_base: None,
                convention: RopeConvention::RotateHalf,
                scaling: self.rope_scaling,
                freq_factors: false,
            },
            norm: NormKind::RmsNorm,
            norm_placement: NormPlacement::Pre,
            norm_eps: self.eps,
            embedding_norm: false,
            final_norm: true,
            ffn: FfnKind::Gated,
            activation: Activation::Silu,
            qkv_bias: false,
            attn_out_bias: false,
            ffn_bias: false,
            norm_bias: false,
            qk_norm: false,
            tie_embeddings: f.tensor_info("output.weight").is_none(),
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
}

/// Metadata keys (under `{arch}.`) that change the arithmetic in ways lucent does not
/// implement, with the value that means "off" where there is one. A file that sets one
/// is refused naming the key, rather than loaded into a model that silently computes
/// something else (ARCHITECTURE.md, principle 7).
const UNSUPPORTED_KEYS: &[(&str, &str)] = &[
    (
        "rope.scaling.type",
        "RoPE scaling (linear, YaRN, LongRoPE …)",
    ),
    ("rope.scaling.factor", "RoPE scaling"),
    ("rope.scale_linear", "linear RoPE scaling"),
    (
        "rope.scaling.attn_factor",
        "RoPE scaling's attention factor",
    ),
    ("rope.scaling.original_context_length", "RoPE scaling"),
    ("rope.scaling.yarn_log_multiplier", "YaRN RoPE scaling"),
    ("rope.scaling.yarn_beta_fast", "YaRN RoPE scaling"),
    ("rope.scaling.yarn_beta_slow", "YaRN RoPE scaling"),
    ("rope.dimension_sections", "multi-section RoPE"),
    (
        "attn_logit_softcapping",
        "soft-capping of the attention logits",
    ),
    (
        "attention.logit_softcapping",
        "soft-capping of the attention logits",
    ),
    (
        "final_logit_softcapping",
        "soft-capping of the output logits",
    ),
    ("attention.clamp_kqv", "clamping of Q, K and V"),
    ("expert_count", "a mixture of experts"),
    ("attention.causal", "non-causal attention in a decoder"),
];

/// Refuse a file whose metadata asks for arithmetic lucent does not do (see
/// [`UNSUPPORTED_KEYS`], less the keys its family `honoured`); "off" values (no scaling,
/// a factor of 1, zero experts, causal = true) pass.
pub(crate) fn refuse_unsupported_keys(f: &GgufFile, arch: &str, honoured: &[&str]) -> Result<()> {
    refuse_keys(f, arch, UNSUPPORTED_KEYS, honoured)?;
    if !honoured.contains(&ROPE_FREQS_TENSOR) && f.tensor_info(ROPE_FREQS_TENSOR).is_some() {
        return Err(Error::Config(format!(
            "{}: tensor rope_freqs.weight sets per-frequency RoPE factors (Llama 3.1-style RoPE scaling), \
             which lucent implements for the llama architecture only, not for {arch}",
            f.path().display()
        )));
    }
    Ok(())
}

/// The RoPE scaling keys (under `{arch}.`) a family honours by passing them to
/// [`GgufHparams::read_honouring`]: read by [`read_rope_scaling`].
pub(crate) const ROPE_SCALING_KEYS: &[&str] = &[
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scale_linear",
    "rope.scaling.attn_factor",
    "rope.scaling.original_context_length",
];

/// The tensor of per-frequency RoPE factors (Llama 3.1/3.2); a family that reads it
/// (`Param::RopeFreqFactors`) passes this name among its honoured keys.
pub(crate) const ROPE_FREQS_TENSOR: &str = "rope_freqs.weight";

/// The RoPE scaling a GGUF file asks for, as llama.cpp reads it (`llama_model::
/// load_hparams` and the context's defaults, llama-cpp-python 0.3.36):
///
/// - `{arch}.rope.scaling.type`: `none`, `linear` or `yarn` (absent: `linear`, which
///   with no factor is no scaling); anything else (`longrope` …) is refused naming the
///   key and value;
/// - `{arch}.rope.scaling.factor` (or the older `{arch}.rope.scale_linear`): s, the
///   context stretch (0 or absent: none); `linear` and `yarn` without one are refused
///   (a scaling that scales nothing is a broken file, not a model);
/// - `yarn`: `{arch}.rope.scaling.original_context_length` (default the
///   `context_length`) and `{arch}.rope.scaling.attn_factor` (default 1); llama.cpp's
///   β_fast = 32, β_slow = 1 and ext_factor = 1 (it reads no other YaRN key for these
///   architectures; the `yarn_*` keys are refused unless 0, or for `yarn_beta_fast` /
///   `yarn_beta_slow` those very values, 32 / 1);
/// - `{arch}.rope.scaling.attn_factor` ≠ 1 without YaRN is refused.
pub(crate) fn read_rope_scaling(f: &GgufFile, arch: &str) -> Result<RopeScaling> {
    let k = |s: &str| format!("{arch}.{s}");
    let (type_key, factor_key) = (k("rope.scaling.type"), k("rope.scaling.factor"));
    let kind = f.opt_str(&type_key)?;
    let mut factor = f.opt_f32(&factor_key)?.map(|x| (factor_key.clone(), x));
    if factor.is_none() {
        let old = k("rope.scale_linear");
        factor = f.opt_f32(&old)?.map(|x| (old, x));
    }
    if let Some((key, x)) = &factor {
        if !(x.is_finite() && *x >= 0.0) {
            return Err(Error::Config(format!(
                "{}: {key} = {x}: a RoPE scaling factor must be a finite number > 0 (0: none)",
                f.path().display()
            )));
        }
    }
    let factor = factor.map(|(_, x)| x).filter(|x| *x != 0.0);
    let attn_key = k("rope.scaling.attn_factor");
    let attn_factor = f.opt_f32(&attn_key)?.unwrap_or(1.0);
    if !(attn_factor.is_finite() && attn_factor > 0.0) {
        return Err(Error::Config(format!(
            "{}: {attn_key} = {attn_factor} must be a finite number > 0",
            f.path().display()
        )));
    }
    let no_factor = |kind: &str| {
        Error::Config(format!(
            "{}: {type_key} = {kind} without {factor_key}: a scaling with nothing to scale by; \
             lucent refuses the file rather than guess",
            f.path().display()
        ))
    };
    let scaling = match (kind, factor) {
        (None, None) | (Some("none"), _) => RopeScaling::None,
        (None | Some("linear"), Some(factor)) => RopeScaling::Linear { factor },
        (Some("yarn"), Some(factor)) => {
            let orig_key = k("rope.scaling.original_context_length");
            let original_context = match f.opt_u32(&orig_key)? {
                Some(0) | None => f.get_usize(&k("context_length"))?,
                Some(n) => n as usize,
            };
            if original_context == 0 {
                return Err(Error::Config(format!(
                    "{}: YaRN needs {orig_key} or {arch}.context_length > 0",
                    f.path().display()
                )));
            }
            return Ok(RopeScaling::Yarn {
                factor,
                original_context,
                attn_factor,
            });
        }
        (Some(kind @ ("linear" | "yarn")), None) => return Err(no_factor(kind)),
        (Some(other), _) => {
            return Err(Error::Config(format!(
                "{}: {type_key} = \"{other}\" asks for a RoPE scaling lucent does not implement; \
                 it reads \"none\", \"linear\" and \"yarn\" (and Llama 3.1's rope_freqs.weight)",
                f.path().display()
            )))
        }
    };
    if attn_factor != 1.0 {
        return Err(Error::Config(format!(
            "{}: {attn_key} = {attn_factor} multiplies RoPE's cos and sin without YaRN, which \
             lucent does not implement",
            f.path().display()
        )));
    }
    Ok(scaling)
}

/// YaRN's β_fast and β_slow at the values llama.cpp computes with (`llama_hparams`'
/// defaults, 32 and 1: llama-cpp-python 0.3.36 reads neither key for these
/// architectures): a file that states them asks for nothing else, so they pass; any
/// other value is refused naming the key and value.
const YARN_BETA_DEFAULTS: &[(&str, f64)] = &[
    ("rope.scaling.yarn_beta_fast", 32.0),
    ("rope.scaling.yarn_beta_slow", 1.0),
];

/// Refuse a file that sets one of `keys` (under `{arch}.`, with what it asks for) to
/// anything but its "off" value (or, for YaRN's β keys, llama.cpp's value:
/// [`YARN_BETA_DEFAULTS`]), unless the family `honoured` it; a family adds its
/// own list of keys this way.
pub(crate) fn refuse_keys(
    f: &GgufFile,
    arch: &str,
    keys: &[(&str, &str)],
    honoured: &[&str],
) -> Result<()> {
    use crate::io::gguf::GgufValue;
    for (key, what) in keys.iter().filter(|(k, _)| !honoured.contains(k)) {
        let full = format!("{arch}.{key}");
        let Some((_, value)) = f.metadata().iter().find(|(k, _)| *k == full) else {
            continue;
        };
        let default = YARN_BETA_DEFAULTS
            .iter()
            .find(|(k, _)| k == key)
            .map(|&(_, v)| v);
        let off = match value {
            GgufValue::String(s) => s == "none" || s.is_empty(),
            GgufValue::F32(x) => {
                *x == 0.0 || (key.ends_with("factor") && *x == 1.0) || Some(*x as f64) == default
            }
            GgufValue::F64(x) => {
                *x == 0.0 || (key.ends_with("factor") && *x == 1.0) || Some(*x) == default
            }
            GgufValue::U32(0) | GgufValue::I32(0) | GgufValue::U64(0) | GgufValue::I64(0) => true,
            GgufValue::Bool(b) => *key == "attention.causal" && *b,
            _ => false,
        };
        if !off {
            return Err(Error::Config(format!(
                "{}: {full} = {} asks for {what}, which lucent does not implement; \
                 it refuses the file rather than compute something else than the model's authors did",
                f.path().display(),
                value.describe()
            )));
        }
    }
    Ok(())
}

/// Expert keys (under `{arch}.`) asking for mixture arithmetic lucent does not do, with
/// what they ask for; refused by [`read_experts`] unless "off".
const UNSUPPORTED_EXPERT_KEYS: &[(&str, &str)] = &[
    (
        "expert_shared_count",
        "shared experts beside the routed ones",
    ),
    (
        "expert_shared_feed_forward_length",
        "shared experts beside the routed ones",
    ),
    (
        "expert_group_count",
        "expert groups (DeepSeek-V3-style routing)",
    ),
    (
        "expert_group_used_count",
        "expert groups (DeepSeek-V3-style routing)",
    ),
    ("expert_chunk_feed_forward_length", "chunked experts"),
    ("experts_per_group", "expert groups"),
];

/// The mixture of experts a GGUF decoder's metadata describes, read under `{arch}.`:
/// `expert_count` (n; `None` when absent or 0: a dense FFN), `expert_used_count` (k),
/// each expert's width from `expert_feed_forward_length` or else `default_d_ff`, and
/// the weights renormalised over the k (what llama.cpp's `build_moe_ffn` does for
/// `llama` and `qwen3moe` files, whatever `expert_weights_norm` says: a file that sets
/// it to false is refused). Refused by key: another gating function than the softmax
/// (`expert_gating_func` ≠ 1), a weight scale (`expert_weights_scale` ≠ 0, 1), and
/// [`UNSUPPORTED_EXPERT_KEYS`]. Reads nothing else, so a family calls it first: its
/// refusals come before any check of the file's tensors.
pub(crate) fn read_experts(
    f: &GgufFile,
    arch: &str,
    default_d_ff: impl Fn(usize) -> Result<usize>,
) -> Result<Option<ExpertsConfig>> {
    use crate::io::gguf::GgufValue;
    let k = |s: &str| format!("{arch}.{s}");
    let n = f.opt_u32(&k("expert_count"))?.unwrap_or(0) as usize;
    if n == 0 {
        return Ok(None);
    }
    refuse_keys(f, arch, UNSUPPORTED_EXPERT_KEYS, &[])?;
    let refuse = |key: &str, what: &str, value: &GgufValue| {
        Err(Error::Config(format!(
            "{}: {} = {} asks for {what}, which lucent does not implement; it refuses the file \
             rather than compute something else than the model's authors did",
            f.path().display(),
            k(key),
            value.describe()
        )))
    };
    for (key, value) in f.metadata() {
        let Some(name) = key.strip_prefix(&format!("{arch}.")) else {
            continue;
        };
        match (name, value) {
            // 0 (none given) or 1: the softmax.
            ("expert_gating_func", GgufValue::U32(0 | 1) | GgufValue::I32(0 | 1)) => {}
            ("expert_gating_func", v) => {
                return refuse(name, "another expert gating function than the softmax (1)", v)
            }
            ("expert_weights_scale", GgufValue::F32(x)) if *x == 0.0 || *x == 1.0 => {}
            ("expert_weights_scale", v) => return refuse(name, "a scale on the experts' weights", v),
            ("expert_weights_norm", GgufValue::Bool(true)) => {}
            ("expert_weights_norm", v) => {
                return refuse(
                    name,
                    "experts' weights not renormalised (llama.cpp renormalises them for this architecture regardless)",
                    v,
                )
            }
            _ => {}
        }
    }
    let used_key = k("expert_used_count");
    let top_k = f.get_usize(&used_key)?;
    if top_k == 0 || top_k > n {
        return Err(Error::Config(format!(
            "{}: {used_key} = {top_k} with {} = {n}; each token must use 1 to {n} experts",
            f.path().display(),
            k("expert_count")
        )));
    }
    let d_ff = match f.opt_u32(&k("expert_feed_forward_length"))? {
        Some(w) if w > 0 => w as usize,
        _ => default_d_ff(top_k)?,
    };
    Ok(Some(ExpertsConfig {
        n_experts: n,
        top_k,
        d_ff,
        normalize_weights: true,
    }))
}

/// Refuse partial RoPE: `{arch}.rope.dimension_count`, when present, must be the head
/// width (every feature of a head rotated).
pub(crate) fn check_full_rope(f: &GgufFile, arch: &str, head_dim: usize) -> Result<()> {
    let key = format!("{arch}.rope.dimension_count");
    if let Some(n) = f.opt_u32(&key)? {
        if n as usize != head_dim {
            return Err(Error::Config(format!(
                "{}: {key} = {n} but heads have {head_dim} features; partial RoPE is not supported",
                f.path().display()
            )));
        }
    }
    Ok(())
}

/// Translate a `llama` GGUF's metadata into the generic [`ModelConfig`] (validated).
/// A file with `llama.expert_count` > 0 (the Mixtral layout) has a mixture of experts in
/// every layer: `llama.expert_used_count` of them per token, each of width
/// `llama.feed_forward_length`, the router `blk.{i}.ffn_gate_inp` and the experts
/// `ffn_{gate,up,down}_exps` in place of the dense FFN ([`read_experts`]).
pub fn config(f: &GgufFile) -> Result<ModelConfig> {
    let experts = read_experts(f, "llama", |_| f.get_usize("llama.feed_forward_length"))?;
    let honoured: Vec<&str> = ROPE_SCALING_KEYS
        .iter()
        .copied()
        .chain([ROPE_FREQS_TENSOR, "expert_count"])
        .collect();
    let hp = GgufHparams::read_honouring(f, "llama", &honoured)?;
    let mut cfg = hp.base_config("llama", f);
    cfg.experts = experts;
    // GGUF rows are permuted for the interleaved rotation (module docs).
    cfg.position = PositionKind::Rope {
        base: hp.rope_base,
        local_base: None,
        convention: RopeConvention::Interleaved,
        scaling: hp.rope_scaling,
        freq_factors: f.tensor_info(ROPE_FREQS_TENSOR).is_some(),
    };
    check_full_rope(f, "llama", cfg.head_dim)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Every LLaMA parameter's GGUF tensor name (`{i}` = layer).
pub const NAMES: NameTable = NameTable {
    family: "llama",
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
        (Param::FfnRouterWeight, "blk.{i}.ffn_gate_inp.weight"),
        (Param::FfnGateExpsWeight, "blk.{i}.ffn_gate_exps.weight"),
        (Param::FfnUpExpsWeight, "blk.{i}.ffn_up_exps.weight"),
        (Param::FfnDownExpsWeight, "blk.{i}.ffn_down_exps.weight"),
        (Param::FinalNormWeight, "output_norm.weight"),
        (Param::OutputWeight, "output.weight"),
        (Param::RopeFreqFactors, ROPE_FREQS_TENSOR),
    ],
};

/// The weights of a `llama` file (its name table over `f`, shapes from `cfg`).
pub fn weights<'a>(f: &'a GgufFile, cfg: &'a ModelConfig) -> GgufWeights<'a> {
    GgufWeights::new(f, &NAMES, cfg)
}

#[cfg(test)]
mod tests {
    use super::refuse_unsupported_keys;
    use crate::io::gguf::{GgufFile, GgufValue, GgufWriter};

    /// A `qwen3` file holding only `keys` as metadata.
    fn file_with(keys: &[(&str, f32)]) -> GgufFile {
        let mut w = GgufWriter::new();
        w.add("general.architecture", GgufValue::String("qwen3".into()));
        for &(k, v) in keys {
            w.add(&format!("qwen3.{k}"), GgufValue::F32(v));
        }
        GgufFile::from_bytes(&w.to_bytes(), "yarn.gguf").expect("a well-formed file")
    }

    /// YaRN's β keys pass at llama.cpp's values (32, 1) and are refused at any other,
    /// naming the key and the value.
    #[test]
    fn yarn_beta_keys_pass_at_llama_cpp_defaults_and_are_refused_otherwise() {
        let f = file_with(&[
            ("rope.scaling.yarn_beta_fast", 32.0),
            ("rope.scaling.yarn_beta_slow", 1.0),
        ]);
        assert!(refuse_unsupported_keys(&f, "qwen3", &[]).is_ok());
        for (key, value) in [
            ("rope.scaling.yarn_beta_fast", 16.0f32),
            ("rope.scaling.yarn_beta_slow", 2.5),
        ] {
            let f = file_with(&[(key, value)]);
            let e = refuse_unsupported_keys(&f, "qwen3", &[])
                .expect_err("a β other than llama.cpp's")
                .to_string();
            assert!(
                e.contains(&format!("qwen3.{key}")) && e.contains(&value.to_string()),
                "{e}"
            );
        }
    }
}
