//! BERT (and its small cousins such as MiniLM) and RoBERTa / XLM-RoBERTa, which have
//! BERT's layers and names: a config translation and a name table.
//!
//! BERT is the generic encoder with:
//! - token + learned absolute position + token type embeddings, summed, then LayerNorm;
//! - post-norm layers: x = LN(x + MHA(x)); x = LN(x + W₂ GELU(W₁ x + b₁) + b₂);
//! - GELU with the exact erf (`hidden_act: "gelu"`), biases everywhere, ε from the file;
//! - no final norm (the last layer's post-norm is the last step).
//!
//! RoBERTa differs only in numbering its positions after the padding row
//! ([`PositionIds::AfterPadding`], rows pad_token_id + 1, + 2, …) and in the `roberta.`
//! key prefix of its task checkpoints.
//!
//! Hugging Face `config.json` ([`HfBertConfig`]) → [`ModelConfig`] by [`config`]; the
//! checkpoint keys of every parameter are in [`NAMES`], the only place they are written.

use std::path::Path;

use serde::Deserialize;

use super::{NameTable, Param, WeightSource, Weights};
use crate::io::SafetensorsFile;
use crate::model::encoder::{EncoderModel, PositionIds};
use crate::model::{FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind};
use crate::ops::Activation;
use crate::{Error, Result};

/// The fields of a Hugging Face BERT `config.json` that lucent reads.
#[derive(Clone, Debug, Deserialize)]
pub struct HfBertConfig {
    /// `"bert"` for BERT and MiniLM.
    #[serde(default)]
    pub model_type: Option<String>,
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Width d.
    pub hidden_size: usize,
    /// Layers N.
    pub num_hidden_layers: usize,
    /// Heads h.
    pub num_attention_heads: usize,
    /// Feed-forward width d_ff.
    pub intermediate_size: usize,
    /// Feed-forward nonlinearity (`"gelu"` = erf GELU).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Rows of the position table.
    #[serde(default = "default_positions")]
    pub max_position_embeddings: usize,
    /// Rows of the token type table.
    #[serde(default = "default_types")]
    pub type_vocab_size: usize,
    /// ε of every LayerNorm.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Only `"absolute"` is supported.
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    /// The padding id; RoBERTa's positions are numbered after it.
    #[serde(default)]
    pub pad_token_id: Option<usize>,
}

/// The `model_type`s this family reads.
pub const MODEL_TYPES: &[&str] = &["bert", "roberta", "xlm-roberta"];

impl HfBertConfig {
    /// Whether positions are numbered RoBERTa's way (after the padding row).
    pub fn is_roberta(&self) -> bool {
        matches!(self.model_type.as_deref(), Some("roberta" | "xlm-roberta"))
    }

    /// How the position rows are numbered: from 0 (BERT) or after the padding row
    /// (RoBERTa, `pad_token_id`, default 1).
    pub fn position_ids(&self) -> PositionIds {
        if self.is_roberta() {
            PositionIds::AfterPadding {
                padding_idx: self.pad_token_id.unwrap_or(1),
            }
        } else {
            PositionIds::FromZero
        }
    }
}

fn default_act() -> String {
    "gelu".into()
}
fn default_positions() -> usize {
    512
}
fn default_types() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

/// The largest `config.json` lucent reads (a real one is a few KB): a bigger file is
/// refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Parse `config.json` of a BERT model folder. A file over [`MAX_CONFIG_BYTES`] is
/// refused unread.
pub fn read_config(path: &Path) -> Result<HfBertConfig> {
    let len = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    if len > MAX_CONFIG_BYTES {
        return Err(Error::format(
            path,
            format!(
                "config.json is {len} bytes; a model's config.json is a few KB and lucent reads at most {MAX_CONFIG_BYTES} bytes"
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_config(&bytes, path)
}

/// Parse the bytes of a BERT `config.json`; `path` names the file in errors, which also
/// name the field at fault (`hidden_size: invalid type: string "big", expected usize`,
/// `missing field `vocab_size``), with the line and column. JSON nested deeper than
/// 128 levels is refused (serde_json's limit), so no nesting can exhaust the stack.
pub fn parse_config(json: &[u8], path: &Path) -> Result<HfBertConfig> {
    if json.len() as u64 > MAX_CONFIG_BYTES {
        return Err(Error::format(
            path,
            format!(
                "config.json is {} bytes; lucent reads at most {MAX_CONFIG_BYTES} bytes",
                json.len()
            ),
        ));
    }
    let fail = |field: &str, e: &dyn std::fmt::Display| {
        let field = match field {
            "" | "." => String::new(),
            f => format!("field '{f}': "),
        };
        Error::format(
            path,
            format!("not a BERT config.json ({field}{e}); it needs vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size"),
        )
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    let cfg: HfBertConfig = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| fail(&e.path().to_string(), e.inner()))?;
    de.end().map_err(|e| fail("", &e))?;
    Ok(cfg)
}

/// Map a Hugging Face `hidden_act` name to an [`Activation`]; unknown names are an error
/// that lists the known ones.
pub fn activation(name: &str) -> Result<Activation> {
    Ok(match name {
        "gelu" => Activation::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        "relu" => Activation::Relu,
        "silu" | "swish" => Activation::Silu,
        other => {
            return Err(Error::Config(format!(
                "hidden_act '{other}' is not supported; known: gelu (erf), gelu_new / gelu_pytorch_tanh / gelu_fast (tanh), relu, silu / swish"
            )))
        }
    })
}

/// Translate a BERT config into the generic [`ModelConfig`] (validated).
pub fn config(hf: &HfBertConfig) -> Result<ModelConfig> {
    if let Some(t) = &hf.model_type {
        if !MODEL_TYPES.contains(&t.as_str()) {
            return Err(Error::Config(format!(
                "model_type '{t}' is not BERT-like; this family reads model_type {MODEL_TYPES:?} from config.json"
            )));
        }
    }
    if let Some(p) = &hf.position_embedding_type {
        if p != "absolute" {
            return Err(Error::Config(format!(
                "position_embedding_type '{p}' is not supported; lucent's BERT uses learned absolute positions (\"absolute\")"
            )));
        }
    }
    post_norm_encoder(EncoderSizes {
        family: hf.model_type.clone().unwrap_or_else(|| "bert".into()),
        vocab_size: hf.vocab_size,
        d_model: hf.hidden_size,
        layers: hf.num_hidden_layers,
        heads: hf.num_attention_heads,
        d_ff: hf.intermediate_size,
        max_positions: hf.max_position_embeddings,
        type_vocab_size: hf.type_vocab_size,
        norm_eps: hf.layer_norm_eps as f32,
        activation: activation(&hf.hidden_act)?,
        pooler: true,
    })
}

/// What the BERT-family encoders (BERT, RoBERTa, MPNet, DistilBERT) tell apart, each
/// under its own `config.json` names.
#[derive(Clone, Debug)]
pub struct EncoderSizes {
    /// The family's name.
    pub family: String,
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Width d.
    pub d_model: usize,
    /// Layers N.
    pub layers: usize,
    /// Heads h.
    pub heads: usize,
    /// Feed-forward width d_ff.
    pub d_ff: usize,
    /// Rows of the position table.
    pub max_positions: usize,
    /// Rows of the token type table (0: none).
    pub type_vocab_size: usize,
    /// ε of every LayerNorm.
    pub norm_eps: f32,
    /// The feed-forward nonlinearity.
    pub activation: Activation,
    /// Whether a pooler may follow (read when the checkpoint has one).
    pub pooler: bool,
}

/// The generic config of a BERT-family encoder (validated): learned absolute positions,
/// an embedding LayerNorm, post-norm layers, an MLP feed-forward, biases everywhere, no
/// final norm.
pub fn post_norm_encoder(s: EncoderSizes) -> Result<ModelConfig> {
    let cfg = ModelConfig {
        family: s.family,
        kind: ModelKind::Encoder,
        vocab_size: s.vocab_size,
        d_model: s.d_model,
        encoder_layers: s.layers,
        decoder_layers: 0,
        n_heads: s.heads,
        n_kv_heads: s.heads,
        head_dim: ModelConfig::head_dim_for(s.d_model, s.heads)?,
        d_ff: s.d_ff,
        max_positions: s.max_positions,
        type_vocab_size: s.type_vocab_size,
        position: PositionKind::Learned,
        norm: NormKind::LayerNorm,
        norm_placement: NormPlacement::Post,
        norm_eps: s.norm_eps,
        embedding_norm: true,
        final_norm: false,
        ffn: FfnKind::Mlp,
        activation: s.activation,
        qkv_bias: true,
        attn_out_bias: true,
        ffn_bias: true,
        norm_bias: true,
        qk_norm: false,
        tie_embeddings: false,
        embedding_scale: 1.0,
        sliding_window: None,
        global_every: None,
        attention_scale: None,
        pooler: s.pooler,
        qk_norm_whole: false,
        attn_softcap: None,
        final_softcap: None,
        residual_scale: None,
        logit_scale: None,
        attention_scale_in_softmax: false,
        no_rope_every: None,
        experts: None,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// Read and translate `config.json`; errors name the file.
pub fn load_config(path: &Path) -> Result<ModelConfig> {
    config(&read_config(path)?).map_err(|e| match e {
        Error::Config(msg) => Error::format(path, msg),
        other => other,
    })
}

/// Load a BERT model folder in Hugging Face layout (`config.json`, `model.safetensors`)
/// as the generic [`EncoderModel`]. Errors name the missing file or tensor.
pub fn load_model(dir: &Path) -> Result<EncoderModel> {
    // The position-id buffers some checkpoints carry are not parameters.
    let buffers = ["embeddings.position_ids", "embeddings.token_type_ids"];
    load_folder(
        dir,
        read_config,
        config,
        &NAMES,
        &buffers,
        |hf, model, _, _| {
            model.embeddings.position_ids = hf.position_ids();
            Ok(())
        },
    )
}

/// Load a BERT-family folder (`config.json`, `model.safetensors`): `read` parses the
/// config, `translate` turns it into the generic config (its errors name the file), the
/// checkpoint is read through `names` into the generic encoder, `finish` sets what the
/// family adds (position numbering, a bias table) from the parsed config and the
/// weights, and then every tensor but the `buffers` (non-parameters some checkpoints
/// carry) must have been used.
pub fn load_folder<H>(
    dir: &Path,
    read: impl FnOnce(&Path) -> Result<H>,
    translate: impl FnOnce(&H) -> Result<ModelConfig>,
    names: &NameTable,
    buffers: &[&str],
    finish: impl FnOnce(&H, &mut EncoderModel, &Weights, &Path) -> Result<()>,
) -> Result<EncoderModel> {
    if !dir.is_dir() {
        return Err(Error::Argument(format!(
            "model folder {} does not exist; pass a known model name (lucent models) or a folder with config.json, model.safetensors and tokenizer.json",
            dir.display()
        )));
    }
    let path = dir.join("config.json");
    let hf = read(&path)?;
    let cfg = translate(&hf).map_err(|e| match e {
        Error::Config(msg) => Error::format(&path, msg),
        other => other,
    })?;
    let file = SafetensorsFile::open(dir.join("model.safetensors"))?;
    let weights = Weights::new(&file, names, &cfg)?;
    let mut model = EncoderModel::load(cfg.clone(), &weights)?;
    finish(&hf, &mut model, &weights, &path)?;
    for b in buffers {
        weights.skip(b);
    }
    weights.check_all_used()?;
    // A pretrained encoder embeds text, a few rows per product: its weights packed once.
    model.keep_packed_weights();
    Ok(model)
}

/// Every BERT parameter's checkpoint key (`{i}` = layer). MiniLM's sentence-transformers
/// file stores them bare; BertForMaskedLM-style files put `bert.` in front (RoBERTa's
/// `roberta.`).
pub const NAMES: NameTable = NameTable {
    family: "bert",
    prefixes: &["", "bert.", "roberta."],
    keys: &[
        (Param::TokenEmbedding, "embeddings.word_embeddings.weight"),
        (
            Param::PositionEmbedding,
            "embeddings.position_embeddings.weight",
        ),
        (
            Param::TokenTypeEmbedding,
            "embeddings.token_type_embeddings.weight",
        ),
        (Param::EmbeddingNormWeight, "embeddings.LayerNorm.weight"),
        (Param::EmbeddingNormBias, "embeddings.LayerNorm.bias"),
        (Param::PoolerWeight, "pooler.dense.weight"),
        (Param::PoolerBias, "pooler.dense.bias"),
        (
            Param::QueryWeight,
            "encoder.layer.{i}.attention.self.query.weight",
        ),
        (
            Param::QueryBias,
            "encoder.layer.{i}.attention.self.query.bias",
        ),
        (
            Param::KeyWeight,
            "encoder.layer.{i}.attention.self.key.weight",
        ),
        (Param::KeyBias, "encoder.layer.{i}.attention.self.key.bias"),
        (
            Param::ValueWeight,
            "encoder.layer.{i}.attention.self.value.weight",
        ),
        (
            Param::ValueBias,
            "encoder.layer.{i}.attention.self.value.bias",
        ),
        (
            Param::AttnOutWeight,
            "encoder.layer.{i}.attention.output.dense.weight",
        ),
        (
            Param::AttnOutBias,
            "encoder.layer.{i}.attention.output.dense.bias",
        ),
        (
            Param::AttnNormWeight,
            "encoder.layer.{i}.attention.output.LayerNorm.weight",
        ),
        (
            Param::AttnNormBias,
            "encoder.layer.{i}.attention.output.LayerNorm.bias",
        ),
        (
            Param::FfnUpWeight,
            "encoder.layer.{i}.intermediate.dense.weight",
        ),
        (
            Param::FfnUpBias,
            "encoder.layer.{i}.intermediate.dense.bias",
        ),
        (
            Param::FfnDownWeight,
            "encoder.layer.{i}.output.dense.weight",
        ),
        (Param::FfnDownBias, "encoder.layer.{i}.output.dense.bias"),
        (
            Param::FfnNormWeight,
            "encoder.layer.{i}.output.LayerNorm.weight",
        ),
        (
            Param::FfnNormBias,
            "encoder.layer.{i}.output.LayerNorm.bias",
        ),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn minilm_json(act: &str) -> String {
        format!(
            r#"{{"model_type":"bert","vocab_size":30522,"hidden_size":384,"num_hidden_layers":6,
            "num_attention_heads":12,"intermediate_size":1536,"hidden_act":"{act}",
            "max_position_embeddings":512,"type_vocab_size":2,"layer_norm_eps":1e-12,
            "position_embedding_type":"absolute"}}"#
        )
    }

    #[test]
    fn minilm_config_translates() -> TestResult {
        let hf: HfBertConfig = serde_json::from_str(&minilm_json("gelu"))?;
        let c = config(&hf)?;
        assert_eq!(
            (c.d_model, c.n_heads, c.head_dim, c.d_ff),
            (384, 12, 32, 1536)
        );
        assert_eq!(c.encoder_layers, 6);
        assert_eq!(c.norm_placement, NormPlacement::Post);
        assert_eq!(c.activation, Activation::Gelu);
        assert!(c.embedding_norm && !c.final_norm);
        assert_eq!(c.norm_eps, 1e-12);
        Ok(())
    }

    #[test]
    fn unknown_activation_is_named() -> TestResult {
        let hf: HfBertConfig = serde_json::from_str(&minilm_json("mish"))?;
        let e = config(&hf).unwrap_err().to_string();
        assert!(e.contains("hidden_act 'mish'"), "{e}");
        Ok(())
    }

    #[test]
    fn every_param_has_a_key_once() -> TestResult {
        for (i, (p, _)) in NAMES.keys.iter().enumerate() {
            assert!(
                NAMES.keys[i + 1..].iter().all(|(q, _)| q != p),
                "{p:?} twice"
            );
            assert_eq!(
                p.per_layer(),
                NAMES.pattern(*p).ok_or("no pattern")?.contains("{i}"),
                "{p:?}"
            );
        }
        assert_eq!(NAMES.keys.len(), 23);
        Ok(())
    }
}
