//! DistilBERT: BERT with half the layers and its own names. The generic encoder with:
//! - token + learned absolute position embeddings (no token types), summed, then
//!   LayerNorm;
//! - post-norm layers as BERT's: x = LN(x + MHA(x)); x = LN(x + W₂ act(W₁ x + b₁) + b₂);
//! - every LayerNorm with ε = 1e-12 (fixed by the architecture, not in the file);
//! - no pooler, no final norm.
//!
//! Its `config.json` names the sizes `dim`, `n_layers`, `n_heads`, `hidden_dim`
//! ([`HfDistilBertConfig`] → [`ModelConfig`] by [`config`]); `sinusoidal_pos_embds` only
//! says how the position table was initialised — the file holds the table either way.
//! The checkpoint keys are in [`NAMES`].

use std::path::Path;

use serde::Deserialize;

use super::{NameTable, Param};
use crate::model::encoder::{EncoderModel, PositionIds};
use crate::model::ModelConfig;
use crate::{Error, Result};

/// The fields of a Hugging Face DistilBERT `config.json` that lucent reads.
#[derive(Clone, Debug, Deserialize)]
pub struct HfDistilBertConfig {
    /// `"distilbert"`.
    pub model_type: String,
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Width d.
    pub dim: usize,
    /// Layers N.
    pub n_layers: usize,
    /// Heads h.
    pub n_heads: usize,
    /// Feed-forward width d_ff.
    pub hidden_dim: usize,
    /// Feed-forward nonlinearity (`"gelu"` = erf GELU, `"relu"`).
    #[serde(default = "default_act")]
    pub activation: String,
    /// Rows of the position table.
    #[serde(default = "default_positions")]
    pub max_position_embeddings: usize,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_positions() -> usize {
    512
}

/// DistilBERT's LayerNorm ε (set by its code for every norm).
pub const NORM_EPS: f32 = 1e-12;

/// Parse the bytes of a DistilBERT `config.json`; errors name the file and the field.
pub fn parse_config(json: &[u8], path: &Path) -> Result<HfDistilBertConfig> {
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
    let cfg: HfDistilBertConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        Error::format(
            path,
            format!(
                "not a DistilBERT config.json (field '{}': {}); it needs vocab_size, dim, n_layers, n_heads, hidden_dim",
                e.path(),
                e.inner()
            ),
        )
    })?;
    Ok(cfg)
}

/// Translate a DistilBERT config into the generic [`ModelConfig`] (validated).
pub fn config(hf: &HfDistilBertConfig) -> Result<ModelConfig> {
    if hf.model_type != "distilbert" {
        return Err(Error::Config(format!(
            "model_type '{}' is not DistilBERT (\"distilbert\")",
            hf.model_type
        )));
    }
    super::bert::post_norm_encoder(super::bert::EncoderSizes {
        family: "distilbert".into(),
        vocab_size: hf.vocab_size,
        d_model: hf.dim,
        layers: hf.n_layers,
        heads: hf.n_heads,
        d_ff: hf.hidden_dim,
        max_positions: hf.max_position_embeddings,
        type_vocab_size: 0,
        norm_eps: NORM_EPS,
        activation: super::bert::activation(&hf.activation)?,
        pooler: false,
    })
}

/// Load a DistilBERT folder in Hugging Face layout (`config.json`, `model.safetensors`)
/// as the generic [`EncoderModel`]. Errors name the missing file or tensor.
pub fn load_model(dir: &Path) -> Result<EncoderModel> {
    let read = |path: &Path| {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        parse_config(&bytes, path)
    };
    // The position-id buffer some checkpoints carry is not a parameter.
    let buffers = ["embeddings.position_ids"];
    super::bert::load_folder(dir, read, config, &NAMES, &buffers, |_, model, _, _| {
        model.embeddings.position_ids = PositionIds::FromZero;
        Ok(())
    })
}

/// Every DistilBERT parameter's checkpoint key (`{i}` = layer); task checkpoints put
/// `distilbert.` in front.
pub const NAMES: NameTable = NameTable {
    family: "distilbert",
    prefixes: &["", "distilbert."],
    keys: &[
        (Param::TokenEmbedding, "embeddings.word_embeddings.weight"),
        (
            Param::PositionEmbedding,
            "embeddings.position_embeddings.weight",
        ),
        (Param::EmbeddingNormWeight, "embeddings.LayerNorm.weight"),
        (Param::EmbeddingNormBias, "embeddings.LayerNorm.bias"),
        (
            Param::QueryWeight,
            "transformer.layer.{i}.attention.q_lin.weight",
        ),
        (
            Param::QueryBias,
            "transformer.layer.{i}.attention.q_lin.bias",
        ),
        (
            Param::KeyWeight,
            "transformer.layer.{i}.attention.k_lin.weight",
        ),
        (Param::KeyBias, "transformer.layer.{i}.attention.k_lin.bias"),
        (
            Param::ValueWeight,
            "transformer.layer.{i}.attention.v_lin.weight",
        ),
        (
            Param::ValueBias,
            "transformer.layer.{i}.attention.v_lin.bias",
        ),
        (
            Param::AttnOutWeight,
            "transformer.layer.{i}.attention.out_lin.weight",
        ),
        (
            Param::AttnOutBias,
            "transformer.layer.{i}.attention.out_lin.bias",
        ),
        (
            Param::AttnNormWeight,
            "transformer.layer.{i}.sa_layer_norm.weight",
        ),
        (
            Param::AttnNormBias,
            "transformer.layer.{i}.sa_layer_norm.bias",
        ),
        (Param::FfnUpWeight, "transformer.layer.{i}.ffn.lin1.weight"),
        (Param::FfnUpBias, "transformer.layer.{i}.ffn.lin1.bias"),
        (
            Param::FfnDownWeight,
            "transformer.layer.{i}.ffn.lin2.weight",
        ),
        (Param::FfnDownBias, "transformer.layer.{i}.ffn.lin2.bias"),
        (
            Param::FfnNormWeight,
            "transformer.layer.{i}.output_layer_norm.weight",
        ),
        (
            Param::FfnNormBias,
            "transformer.layer.{i}.output_layer_norm.bias",
        ),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_translates_and_names_are_unique() {
        let hf = parse_config(
            br#"{"model_type":"distilbert","vocab_size":30522,"dim":768,"n_layers":6,"n_heads":12,"hidden_dim":3072}"#,
            Path::new("config.json"),
        )
        .unwrap();
        let c = config(&hf).unwrap();
        assert_eq!(
            (c.d_model, c.encoder_layers, c.head_dim, c.d_ff),
            (768, 6, 64, 3072)
        );
        assert_eq!((c.type_vocab_size, c.pooler, c.norm_eps), (0, false, 1e-12));
        for (i, (p, _)) in NAMES.keys.iter().enumerate() {
            assert!(
                NAMES.keys[i + 1..].iter().all(|(q, _)| q != p),
                "{p:?} twice"
            );
        }
        let e = parse_config(
            br#"{"model_type":"distilbert","dim":"big"}"#,
            Path::new("c.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("dim"), "{e}");
    }
}
