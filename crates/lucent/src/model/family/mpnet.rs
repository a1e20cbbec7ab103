//! MPNet (Song et al. 2020; all-mpnet-base-v2): a config translation and a name table.
//!
//! MPNet is the generic encoder (the same post-norm layers as BERT) with two changes:
//! - learned absolute positions numbered RoBERTa's way: real tokens take rows
//!   pad_token_id + 1, pad_token_id + 2, … ([`PositionIds::AfterPadding`]); no token
//!   type embeddings;
//! - a bucketed relative-position bias on every layer's attention scores (32 buckets,
//!   max distance 128, bidirectional: [`RelativePositionBias`]), one table (buckets, h)
//!   for the whole stack, computed once per pass and added to each layer's
//!   q·k/√d_k before the softmax.
//!
//! Hugging Face `config.json` ([`HfMpnetConfig`], `model_type: "mpnet"`) →
//! [`ModelConfig`] by [`config`]; the checkpoint keys are in [`NAMES`].

use std::path::Path;

use serde::Deserialize;

use super::{NameTable, Param};
use crate::model::encoder::{EncoderModel, PositionIds};
use crate::model::ModelConfig;
use crate::nn::{RelativePositionBias, RelativePositionConfig};
use crate::{Error, Result};

/// The fields of a Hugging Face MPNet `config.json` that lucent reads.
#[derive(Clone, Debug, Deserialize)]
pub struct HfMpnetConfig {
    /// `"mpnet"`.
    pub model_type: String,
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
    /// Rows of the position table (514: 512 positions after the padding rows 0 and 1).
    pub max_position_embeddings: usize,
    /// ε of every LayerNorm.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// The padding id, which is also the padding row of the position table.
    #[serde(default = "default_pad")]
    pub pad_token_id: usize,
    /// Buckets of the relative-position bias.
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_eps() -> f64 {
    1e-12
}
fn default_pad() -> usize {
    1
}
fn default_buckets() -> usize {
    32
}

/// MPNet's bucketing: `relative_attention_num_buckets` buckets, max distance 128
/// (fixed in the reference implementation), bidirectional.
pub fn relative_config(hf: &HfMpnetConfig) -> RelativePositionConfig {
    RelativePositionConfig {
        num_buckets: hf.relative_attention_num_buckets,
        ..RelativePositionConfig::MPNET
    }
}

/// Parse the bytes of an MPNet `config.json`; errors name the file and the field.
pub fn parse_config(json: &[u8], path: &Path) -> Result<HfMpnetConfig> {
    if json.len() as u64 > super::bert::MAX_CONFIG_BYTES {
        return Err(Error::format(
            path,
            format!(
                "config.json is {} bytes; lucent reads at most {} bytes",
                json.len(),
                super::bert::MAX_CONFIG_BYTES
            ),
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    let cfg: HfMpnetConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        Error::format(
            path,
            format!(
                "not an MPNet config.json (field '{}': {}); it needs model_type, vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, max_position_embeddings",
                e.path(),
                e.inner()
            ),
        )
    })?;
    Ok(cfg)
}

/// Translate an MPNet config into the generic [`ModelConfig`] (validated).
pub fn config(hf: &HfMpnetConfig) -> Result<ModelConfig> {
    if hf.model_type != "mpnet" {
        return Err(Error::Config(format!(
            "model_type '{}' is not MPNet (\"mpnet\")",
            hf.model_type
        )));
    }
    relative_config(hf).validate()?;
    super::bert::post_norm_encoder(super::bert::EncoderSizes {
        family: "mpnet".into(),
        vocab_size: hf.vocab_size,
        d_model: hf.hidden_size,
        layers: hf.num_hidden_layers,
        heads: hf.num_attention_heads,
        d_ff: hf.intermediate_size,
        max_positions: hf.max_position_embeddings,
        type_vocab_size: 0,
        norm_eps: hf.layer_norm_eps as f32,
        activation: super::bert::activation(&hf.hidden_act)?,
        pooler: true,
    })
}

/// Load an MPNet folder in Hugging Face layout (`config.json`, `model.safetensors`) as
/// the generic [`EncoderModel`] with RoBERTa position numbering and the shared
/// relative-position bias. Errors name the missing file or tensor.
pub fn load_model(dir: &Path) -> Result<EncoderModel> {
    let read = |path: &Path| {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        parse_config(&bytes, path)
    };
    // The position-id buffer (0, 1, 2, …) some checkpoints carry is not a parameter.
    let buffers = ["embeddings.position_ids"];
    super::bert::load_folder(
        dir,
        read,
        config,
        &NAMES,
        &buffers,
        |hf, model, weights, path| {
            let (n_heads, max_positions) = (model.config.n_heads, model.config.max_positions);
            let rel = relative_config(hf);
            let table =
                weights.get_shaped(Param::RelativeAttentionBias, 0, &[rel.num_buckets, n_heads])?; // (buckets, h)
            model.relative_bias = Some(RelativePositionBias::new(table, rel)?);
            model.embeddings.position_ids = PositionIds::AfterPadding {
                padding_idx: hf.pad_token_id,
            };
            if hf.pad_token_id + 1 >= max_positions {
                return Err(Error::format(
                    path,
                    format!(
                        "pad_token_id {} leaves no rows of the {} position rows for tokens",
                        hf.pad_token_id, max_positions
                    ),
                ));
            }
            Ok(())
        },
    )
}

/// Every MPNet parameter's checkpoint key (`{i}` = layer). The sentence-transformers
/// file stores them bare; MPNetForMaskedLM files put `mpnet.` in front.
pub const NAMES: NameTable = NameTable {
    family: "mpnet",
    prefixes: &["", "mpnet."],
    keys: &[
        (Param::TokenEmbedding, "embeddings.word_embeddings.weight"),
        (
            Param::PositionEmbedding,
            "embeddings.position_embeddings.weight",
        ),
        (Param::EmbeddingNormWeight, "embeddings.LayerNorm.weight"),
        (Param::EmbeddingNormBias, "embeddings.LayerNorm.bias"),
        (
            Param::RelativeAttentionBias,
            "encoder.relative_attention_bias.weight",
        ),
        (Param::PoolerWeight, "pooler.dense.weight"),
        (Param::PoolerBias, "pooler.dense.bias"),
        (
            Param::QueryWeight,
            "encoder.layer.{i}.attention.attn.q.weight",
        ),
        (Param::QueryBias, "encoder.layer.{i}.attention.attn.q.bias"),
        (
            Param::KeyWeight,
            "encoder.layer.{i}.attention.attn.k.weight",
        ),
        (Param::KeyBias, "encoder.layer.{i}.attention.attn.k.bias"),
        (
            Param::ValueWeight,
            "encoder.layer.{i}.attention.attn.v.weight",
        ),
        (Param::ValueBias, "encoder.layer.{i}.attention.attn.v.bias"),
        (
            Param::AttnOutWeight,
            "encoder.layer.{i}.attention.attn.o.weight",
        ),
        (
            Param::AttnOutBias,
            "encoder.layer.{i}.attention.attn.o.bias",
        ),
        (
            Param::AttnNormWeight,
            "encoder.layer.{i}.attention.LayerNorm.weight",
        ),
        (
            Param::AttnNormBias,
            "encoder.layer.{i}.attention.LayerNorm.bias",
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

    const ALL_MPNET: &str = r#"{"model_type":"mpnet","vocab_size":30527,"hidden_size":768,
        "num_hidden_layers":12,"num_attention_heads":12,"intermediate_size":3072,
        "hidden_act":"gelu","max_position_embeddings":514,"layer_norm_eps":1e-05,
        "pad_token_id":1,"relative_attention_num_buckets":32}"#;

    #[test]
    fn all_mpnet_config_translates() -> TestResult {
        let hf = parse_config(ALL_MPNET.as_bytes(), Path::new("config.json"))?;
        let c = config(&hf)?;
        assert_eq!(
            (c.d_model, c.n_heads, c.head_dim, c.d_ff),
            (768, 12, 64, 3072)
        );
        assert_eq!(c.type_vocab_size, 0);
        assert_eq!(c.norm_eps, 1e-5);
        assert_eq!(relative_config(&hf), RelativePositionConfig::MPNET);
        Ok(())
    }

    #[test]
    fn missing_field_is_named() {
        let e = parse_config(br#"{"model_type":"mpnet"}"#, Path::new("config.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("vocab_size"), "{e}");
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
        Ok(())
    }
}
