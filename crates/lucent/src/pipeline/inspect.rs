//! What a GGUF file holds and whether lucent runs it, from its metadata and tensor table
//! only (no weight is read, so it takes well under a second on a real model): the
//! architecture, the parameter count, the mix of storage types, the hyper-parameters,
//! RoPE, the tokenizer, the chat template, and lucent's verdict. The verdict comes from
//! the same steps `generate` takes before it reads weights (the family registry's
//! [`gguf_family`], the family's config translation, the tokenizer), so a refusal here
//! names the same key, type or architecture that `generate` would.

use std::path::Path;

use serde::Serialize;

use crate::io::gguf::{GgufFile, GgufValue};
use crate::io::gguf_tokenizer::GgufTokenizer;
use crate::model::config::PositionKind;
use crate::model::family::gguf_family;
use crate::pipeline::chat::ChatTemplate;
use crate::Result;

/// The tensors of one storage type.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TypeMix {
    /// ggml's name of the type (`Q4_K`, `F32`).
    #[serde(rename = "type")]
    pub dtype: String,
    /// How many tensors are stored in it.
    pub tensors: usize,
    /// Their elements.
    pub params: u64,
    /// Their bytes in the file.
    pub bytes: u64,
}

/// The hyper-parameters under `{arch}.` (None where the file does not say).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Hparams {
    /// `context_length`.
    pub context_length: Option<u64>,
    /// `embedding_length` (d).
    pub embedding_length: Option<u64>,
    /// `block_count` (layers).
    pub block_count: Option<u64>,
    /// `attention.head_count` (h).
    pub head_count: Option<u64>,
    /// `attention.head_count_kv` (h_kv; h when absent).
    pub head_count_kv: Option<u64>,
    /// `attention.key_length` (d_k; d / h when absent).
    pub head_dim: Option<u64>,
    /// `feed_forward_length` (d_ff).
    pub feed_forward_length: Option<u64>,
    /// Tokens in the vocabulary (`tokenizer.ggml.tokens`).
    pub vocab_size: Option<u64>,
    /// `expert_count` (n experts of a mixture; absent in a dense model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_count: Option<u64>,
    /// `expert_used_count` (k experts per token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_used_count: Option<u64>,
    /// `expert_feed_forward_length` (each expert's d_ff, where it differs from
    /// `feed_forward_length`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_feed_forward_length: Option<u64>,
}

/// RoPE as the file sets it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RopeInfo {
    /// `rope.freq_base` (θ).
    pub freq_base: Option<f64>,
    /// `rope.dimension_count` (features rotated per head).
    pub dimension_count: Option<u64>,
    /// Every `rope.scaling.*` key present, with its value.
    pub scaling: Vec<(String, String)>,
    /// The scaling as lucent computes it (from the family's config: linear, YaRN with
    /// its magnitude, frequency factors from `rope_freqs.weight`), when the family reads
    /// the file's config; `None` when it refuses it.
    pub computed: Option<String>,
}

/// The tokenizer as the file names it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TokenizerInfo {
    /// `tokenizer.ggml.model` (`gpt2` = byte-level BPE, `llama` = SentencePiece).
    pub model: Option<String>,
    /// `tokenizer.ggml.pre` (the pre-tokenizer's regexes).
    pub pre: Option<String>,
}

/// The chat template, if any.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatTemplateInfo {
    /// Whether `tokenizer.chat_template` is present.
    pub present: bool,
    /// Its first non-empty line.
    pub first_line: Option<String>,
}

/// Everything `lucent inspect` says about a GGUF file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GgufReport {
    /// The file.
    pub path: String,
    /// Its size in bytes.
    pub file_bytes: u64,
    /// GGUF version.
    pub gguf_version: u32,
    /// `general.architecture`.
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Tensors in the table.
    pub tensors: usize,
    /// Σ elements over every tensor.
    pub parameters: u64,
    /// Per storage type, largest share of bytes first.
    pub types: Vec<TypeMix>,
    /// Hyper-parameters.
    pub hparams: Hparams,
    /// RoPE.
    pub rope: RopeInfo,
    /// Tokenizer.
    pub tokenizer: TokenizerInfo,
    /// Chat template.
    pub chat_template: ChatTemplateInfo,
    /// Whether lucent runs it (its architecture, config and tokenizer are accepted).
    pub runs: bool,
    /// The family that reads it, when one does.
    pub family: Option<String>,
    /// Why lucent refuses it: the error `generate` would give, naming the key, type or
    /// architecture.
    pub refusal: Option<String>,
}

/// Read `path`'s metadata and tensor table and say what it holds and whether lucent
/// runs it. A file lucent cannot even read (not GGUF, a tensor type it does not know)
/// is an error naming what it could not read.
pub fn inspect_gguf(path: &Path) -> Result<GgufReport> {
    let f = GgufFile::open(path)?;
    Ok(report(&f))
}

/// [`inspect_gguf`] of a file already open.
pub fn report(f: &GgufFile) -> GgufReport {
    let arch = f.architecture().ok().map(str::to_string);
    let a = arch.clone().unwrap_or_default();
    let int = |key: &str| f.get(&format!("{a}.{key}")).and_then(as_u64);
    let mut types: Vec<TypeMix> = Vec::new();
    for t in f.tensor_infos() {
        let name = t.dtype.name().to_string();
        let i = match types.iter().position(|m| m.dtype == name) {
            Some(i) => i,
            None => {
                types.push(TypeMix {
                    dtype: name,
                    tensors: 0,
                    params: 0,
                    bytes: 0,
                });
                types.len() - 1
            }
        };
        types[i].tensors += 1;
        types[i].params += t.numel() as u64;
        types[i].bytes += t.len as u64;
    }
    types.sort_by(|x, y| y.bytes.cmp(&x.bytes).then(x.dtype.cmp(&y.dtype)));
    let scaling_prefix = format!("{a}.rope.scaling.");
    let rope = RopeInfo {
        freq_base: f.get(&format!("{a}.rope.freq_base")).and_then(as_f64),
        dimension_count: int("rope.dimension_count"),
        scaling: f
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with(&scaling_prefix))
            .map(|(k, v)| (k.clone(), show(v)))
            .collect(),
        computed: gguf_family(f)
            .and_then(|fam| fam.config(f))
            .ok()
            .map(|cfg| match cfg.position {
                PositionKind::Rope {
                    scaling,
                    freq_factors,
                    ..
                } => {
                    let factors = if freq_factors {
                        ", frequency factors from rope_freqs.weight"
                    } else {
                        ""
                    };
                    format!("{scaling}{factors}")
                }
                _ => "no RoPE".into(),
            }),
    };
    let hparams = Hparams {
        context_length: int("context_length"),
        embedding_length: int("embedding_length"),
        block_count: int("block_count"),
        head_count: int("attention.head_count"),
        head_count_kv: int("attention.head_count_kv").or(int("attention.head_count")),
        head_dim: int("attention.key_length").or_else(|| {
            match (int("embedding_length"), int("attention.head_count")) {
                (Some(d), Some(h)) if h > 0 => Some(d / h),
                _ => None,
            }
        }),
        feed_forward_length: int("feed_forward_length"),
        vocab_size: f.get("tokenizer.ggml.tokens").and_then(|v| match v {
            GgufValue::Array(a) => Some(a.len() as u64),
            _ => None,
        }),
        expert_count: int("expert_count").filter(|&n| n > 0),
        expert_used_count: int("expert_used_count")
            .filter(|_| int("expert_count").unwrap_or(0) > 0),
        expert_feed_forward_length: int("expert_feed_forward_length"),
    };
    let text = |key: &str| match f.get(key) {
        Some(GgufValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let template = text("tokenizer.chat_template");
    let verdict = verdict(f);
    GgufReport {
        path: f.path().display().to_string(),
        file_bytes: f.map().len() as u64,
        gguf_version: f.version(),
        architecture: arch,
        name: text("general.name"),
        tensors: f.tensor_infos().len(),
        parameters: f.tensor_infos().iter().map(|t| t.numel() as u64).sum(),
        types,
        hparams,
        rope,
        tokenizer: TokenizerInfo {
            model: text("tokenizer.ggml.model"),
            pre: text("tokenizer.ggml.pre"),
        },
        chat_template: ChatTemplateInfo {
            present: template.is_some(),
            first_line: template.as_deref().and_then(|t| {
                t.lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .map(str::to_string)
            }),
        },
        runs: verdict.is_ok(),
        family: verdict.as_ref().ok().map(|s| s.to_string()),
        refusal: verdict.err().map(|e| e.to_string()),
    }
}

/// The steps `generate` takes before reading weights: the family of the architecture,
/// its config translation (which refuses the keys it cannot honour), the tokenizer and
/// the chat template. The family's name when all pass.
fn verdict(f: &GgufFile) -> Result<&'static str> {
    let fam = gguf_family(f)?;
    fam.config(f)?;
    let tok = GgufTokenizer::from_gguf(f)?;
    ChatTemplate::from_gguf(f, &tok)?;
    Ok(fam.arch)
}

fn as_u64(v: &GgufValue) -> Option<u64> {
    match *v {
        GgufValue::U8(x) => Some(x.into()),
        GgufValue::U16(x) => Some(x.into()),
        GgufValue::U32(x) => Some(x.into()),
        GgufValue::U64(x) => Some(x),
        GgufValue::I8(x) => u64::try_from(x).ok(),
        GgufValue::I16(x) => u64::try_from(x).ok(),
        GgufValue::I32(x) => u64::try_from(x).ok(),
        GgufValue::I64(x) => u64::try_from(x).ok(),
        _ => None,
    }
}

fn as_f64(v: &GgufValue) -> Option<f64> {
    match *v {
        GgufValue::F32(x) => Some(x.into()),
        GgufValue::F64(x) => Some(x),
        _ => as_u64(v).map(|x| x as f64),
    }
}

/// A metadata value as text (strings unquoted).
fn show(v: &GgufValue) -> String {
    match v {
        GgufValue::String(s) => s.clone(),
        GgufValue::Bool(b) => b.to_string(),
        other => as_f64(other).map_or_else(|| other.describe(), |x| x.to_string()),
    }
}
