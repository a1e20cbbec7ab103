//! Model families: each is a config translation (the file's own schema → [`ModelConfig`])
//! plus one table of weight names (checkpoint key of every parameter of the generic
//! model). A family never holds model code (ARCHITECTURE.md, principle 1).
//!
//! [`Param`] names the parameters of the generic Transformer by their role; a family's
//! table maps each role to the checkpoint key; [`Weights`] reads them from a safetensors
//! file with the shape the [`ModelConfig`] expects, and errors name the key and both
//! shapes.

pub mod bert;
pub mod gemma3;
pub mod llama;

use crate::io::gguf::GgufFile;
use crate::io::SafetensorsFile;
use crate::model::ModelConfig;
use crate::nn::Weight;
use crate::tensor::quant::GgmlType;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A parameter of the generic encoder/decoder, by its role. Per-layer roles take the
/// layer index from the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// Token embedding table (V, d).
    TokenEmbedding,
    /// Learned position table (max_positions, d).
    PositionEmbedding,
    /// Token type (segment) table (type_vocab_size, d).
    TokenTypeEmbedding,
    /// LayerNorm γ right after the embeddings (d).
    EmbeddingNormWeight,
    /// LayerNorm β right after the embeddings (d).
    EmbeddingNormBias,
    /// W_q (h·d_k, d).
    QueryWeight,
    /// b_q (h·d_k).
    QueryBias,
    /// W_k (h_kv·d_k, d).
    KeyWeight,
    /// b_k (h_kv·d_k).
    KeyBias,
    /// W_v (h_kv·d_k, d).
    ValueWeight,
    /// b_v (h_kv·d_k).
    ValueBias,
    /// W_o (d, h·d_k).
    AttnOutWeight,
    /// b_o (d).
    AttnOutBias,
    /// γ of the norm around self-attention (d).
    AttnNormWeight,
    /// β of the norm around self-attention (d).
    AttnNormBias,
    /// W₁ of the feed-forward network (d_ff, d).
    FfnUpWeight,
    /// b₁ (d_ff).
    FfnUpBias,
    /// W₂ of the feed-forward network (d, d_ff).
    FfnDownWeight,
    /// b₂ (d).
    FfnDownBias,
    /// γ of the norm around the feed-forward network (d).
    FfnNormWeight,
    /// β of the norm around the feed-forward network (d).
    FfnNormBias,
    /// W_gate of a gated feed-forward network (d_ff, d).
    FfnGateWeight,
    /// γ of the QK-norm over each query head (d_k).
    QueryNormWeight,
    /// γ of the QK-norm over each key head (d_k).
    KeyNormWeight,
    /// γ of the norm on the attention's output (sandwich placement) (d).
    AttnPostNormWeight,
    /// γ of the norm on the feed-forward network's output (sandwich placement) (d).
    FfnPostNormWeight,
    /// γ of the norm after the last layer (d).
    FinalNormWeight,
    /// The output head W_vocab (V, d), when not tied to the token embedding.
    OutputWeight,
}

impl Param {
    /// The shape this parameter must have under `cfg`.
    pub fn shape(self, cfg: &ModelConfig) -> Vec<usize> {
        let d = cfg.d_model;
        use Param::*;
        match self {
            TokenEmbedding | OutputWeight => vec![cfg.vocab_size, d],
            FfnGateWeight => vec![cfg.d_ff, d],
            QueryNormWeight | KeyNormWeight => vec![cfg.head_dim],
            AttnPostNormWeight | FfnPostNormWeight | FinalNormWeight => vec![d],
            PositionEmbedding => vec![cfg.max_positions, d],
            TokenTypeEmbedding => vec![cfg.type_vocab_size, d],
            QueryWeight => vec![cfg.q_dim(), d],
            QueryBias => vec![cfg.q_dim()],
            KeyWeight | ValueWeight => vec![cfg.kv_dim(), d],
            KeyBias | ValueBias => vec![cfg.kv_dim()],
            AttnOutWeight => vec![d, cfg.q_dim()],
            FfnUpWeight => vec![cfg.d_ff, d],
            FfnUpBias => vec![cfg.d_ff],
            FfnDownWeight => vec![d, cfg.d_ff],
            EmbeddingNormWeight | EmbeddingNormBias | AttnOutBias | AttnNormWeight
            | AttnNormBias | FfnDownBias | FfnNormWeight | FfnNormBias => vec![d],
        }
    }

    /// Whether the parameter belongs to one layer (its key holds `{i}`).
    pub fn per_layer(self) -> bool {
        use Param::*;
        !matches!(
            self,
            TokenEmbedding
                | PositionEmbedding
                | TokenTypeEmbedding
                | EmbeddingNormWeight
                | EmbeddingNormBias
                | FinalNormWeight
                | OutputWeight
        )
    }
}

/// A family's weight-name table: the checkpoint key of each role, `{i}` standing for
/// the layer index, and an optional prefix that some checkpoints put in front of every
/// key (e.g. `bert.` in a BertForMaskedLM file).
pub struct NameTable {
    /// Family name, for messages.
    pub family: &'static str,
    /// Prefixes to try, in order; the first under which the token embedding exists wins.
    pub prefixes: &'static [&'static str],
    /// (role, key pattern).
    pub keys: &'static [(Param, &'static str)],
}

impl NameTable {
    /// The key pattern of `param`, or `None` if the family has no such parameter.
    pub fn pattern(&self, param: Param) -> Option<&'static str> {
        self.keys.iter().find(|(p, _)| *p == param).map(|(_, k)| *k)
    }

    /// The name of `param` in layer `layer` (ignored for global parameters), or an
    /// error if this table has no entry for it.
    pub fn key(&self, param: Param, layer: usize) -> Result<String> {
        let pat = self.pattern(param).ok_or_else(|| {
            Error::Weights(format!(
                "the {} name table has no entry for {param:?}",
                self.family
            ))
        })?;
        Ok(pat.replace("{i}", &layer.to_string()))
    }
}

/// A safetensors file read through a family's name table, with the shapes of a config.
pub struct Weights<'a> {
    file: &'a SafetensorsFile,
    table: &'a NameTable,
    cfg: &'a ModelConfig,
    prefix: &'static str,
}

impl<'a> Weights<'a> {
    /// Match `file` to `table`: find the key prefix under which the token embedding is
    /// stored. Error if none matches (the file is not of this family).
    pub fn new(
        file: &'a SafetensorsFile,
        table: &'a NameTable,
        cfg: &'a ModelConfig,
    ) -> Result<Self> {
        let emb = table.pattern(Param::TokenEmbedding).ok_or_else(|| {
            Error::Weights(format!(
                "{}: name table has no token embedding",
                table.family
            ))
        })?;
        let prefix = table
            .prefixes
            .iter()
            .find(|p| file.entry(&format!("{p}{emb}")).is_some())
            .ok_or_else(|| {
                let some: Vec<&str> = file.names().take(5).collect();
                Error::Weights(format!(
                    "{}: no tensor '{emb}' (with any of the prefixes {:?}): this is not a {} checkpoint (its first keys are {some:?})",
                    file.path().display(),
                    table.prefixes,
                    table.family
                ))
            })?;
        Ok(Weights {
            file,
            table,
            cfg,
            prefix,
        })
    }

    /// The checkpoint key of `param` in layer `layer` (ignored for global parameters).
    pub fn key(&self, param: Param, layer: usize) -> Result<String> {
        Ok(format!("{}{}", self.prefix, self.table.key(param, layer)?))
    }

    /// Whether the file holds `param` (for optional parameters).
    pub fn has(&self, param: Param, layer: usize) -> bool {
        self.key(param, layer)
            .is_ok_and(|k| self.file.entry(&k).is_some())
    }

    /// Read `param` of `layer`, checked against the shape the config expects. A missing
    /// or mis-shaped tensor is an error naming the key and both shapes.
    pub fn get(&self, param: Param, layer: usize) -> Result<Tensor> {
        let key = self.key(param, layer)?;
        let want = param.shape(self.cfg);
        match self.file.entry(&key) {
            None => Err(Error::Weights(format!(
                "{}: missing tensor '{key}' ({param:?}, expected shape {want:?}); the file does not match its config.json",
                self.file.path().display()
            ))),
            Some(e) if e.shape != want => Err(Error::Weights(format!(
                "{}: tensor '{key}' has shape {:?}, expected {want:?} from config.json; the weights and the config disagree",
                self.file.path().display(),
                e.shape
            ))),
            Some(_) => self.file.tensor(&key),
        }
    }
}

/// A GGUF file read through a family's name table, with the shapes of a config.
/// Matrices come back as [`Weight`]s that keep the file's quantised blocks (memory-mapped,
/// not copied); vectors (norm weights) as f32 tensors.
pub struct GgufWeights<'a> {
    file: &'a GgufFile,
    table: &'a NameTable,
    cfg: &'a ModelConfig,
}

impl<'a> GgufWeights<'a> {
    /// Read `file` through `table` with the shapes of `cfg`.
    pub fn new(file: &'a GgufFile, table: &'a NameTable, cfg: &'a ModelConfig) -> Self {
        GgufWeights { file, table, cfg }
    }

    /// The file.
    pub fn file(&self) -> &GgufFile {
        self.file
    }

    /// The tensor name of `param` in layer `layer` (ignored for global parameters).
    pub fn key(&self, param: Param, layer: usize) -> Result<String> {
        self.table.key(param, layer)
    }

    /// Whether the file holds `param` (for optional parameters such as an untied head).
    pub fn has(&self, param: Param, layer: usize) -> bool {
        self.key(param, layer)
            .is_ok_and(|k| self.file.tensor_info(&k).is_some())
    }

    /// A matrix parameter, checked against the config's shape: quantised types stay
    /// quantised, F32 is mapped, F16/BF16 are widened to f32.
    pub fn matrix(&self, param: Param, layer: usize) -> Result<Weight> {
        let key = self.key(param, layer)?;
        let want = param.shape(self.cfg);
        let [rows, cols] = [want[0], want[1]];
        let info = self.file.tensor(&key)?.info;
        match info.dtype {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                Ok(Weight::F32(self.file.tensor_f32_shaped(&key, &want)?))
            }
            _ => Ok(self.file.qmatrix_shaped(&key, rows, cols)?.into()),
        }
    }

    /// A vector or matrix parameter as f32 (dequantised if stored quantised).
    pub fn tensor(&self, param: Param, layer: usize) -> Result<Tensor> {
        let key = self.key(param, layer)?;
        self.file.tensor_f32_shaped(&key, &param.shape(self.cfg))
    }
}
