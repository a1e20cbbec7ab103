//! Model families: each is a config translation (the file's own schema → [`ModelConfig`])
//! plus one table of weight names (checkpoint key of every parameter of the generic
//! model). A family never holds model code (ARCHITECTURE.md, principle 1).
//!
//! [`Param`] names the parameters of the generic Transformer by their role; a family's
//! table maps each role to the checkpoint key; [`Weights`] reads them from a safetensors
//! file with the shape the [`ModelConfig`] expects, and errors name the key and both
//! shapes.

pub mod bert;
pub mod distilbert;
pub mod gemma2;
pub mod gemma3;
pub mod gpt2;
pub mod granite;
pub mod llama;
pub mod mpnet;
pub mod olmo2;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3moe;
pub mod registry;
pub mod smollm3;
pub mod whisper;

use crate::io::gguf::GgufFile;
use crate::io::SafetensorsFile;
use crate::model::ModelConfig;
use crate::nn::Weight;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A family of GGUF decoders: the `general.architecture` it reads, its config
/// translation and its name table.
pub struct GgufFamily {
    /// `general.architecture`.
    pub arch: &'static str,
    /// Metadata → config.
    pub config_fn: fn(&GgufFile) -> Result<ModelConfig>,
    /// Tensor names.
    pub names: &'static NameTable,
}

impl GgufFamily {
    /// The file's config, translated and validated.
    pub fn config(&self, f: &GgufFile) -> Result<ModelConfig> {
        (self.config_fn)(f)
    }

    /// The file's tensors through this family's name table, with `cfg`'s shapes.
    pub fn weights<'a>(&'a self, f: &'a GgufFile, cfg: &'a ModelConfig) -> GgufWeights<'a> {
        GgufWeights::new(f, self.names, cfg)
    }
}

/// Every GGUF architecture lucent reads.
pub const GGUF_FAMILIES: &[GgufFamily] = &[
    GgufFamily {
        arch: "llama",
        config_fn: llama::config,
        names: &llama::NAMES,
    },
    GgufFamily {
        arch: "gemma3",
        config_fn: gemma3::config,
        names: &gemma3::NAMES,
    },
    GgufFamily {
        arch: "qwen2",
        config_fn: qwen2::config,
        names: &qwen2::NAMES,
    },
    GgufFamily {
        arch: "qwen3",
        config_fn: qwen3::config,
        names: &qwen3::NAMES,
    },
    GgufFamily {
        arch: "gemma2",
        config_fn: gemma2::config,
        names: &gemma2::NAMES,
    },
    GgufFamily {
        arch: "olmo2",
        config_fn: olmo2::config,
        names: &olmo2::NAMES,
    },
    GgufFamily {
        arch: "granite",
        config_fn: granite::config,
        names: &granite::NAMES,
    },
    GgufFamily {
        arch: "smollm3",
        config_fn: smollm3::config,
        names: &smollm3::NAMES,
    },
    GgufFamily {
        arch: "qwen3moe",
        config_fn: qwen3moe::config,
        names: &qwen3moe::NAMES,
    },
    GgufFamily {
        arch: "phi3",
        config_fn: phi3::config,
        names: &phi3::NAMES,
    },
];

/// The family of a GGUF file, by its `general.architecture`; an error lists the
/// architectures lucent reads.
pub fn gguf_family(f: &GgufFile) -> Result<&'static GgufFamily> {
    let arch = f.architecture()?;
    GGUF_FAMILIES.iter().find(|fam| fam.arch == arch).ok_or_else(|| {
        let known: Vec<&str> = GGUF_FAMILIES.iter().map(|f| f.arch).collect();
        Error::Config(format!(
            "{}: architecture '{arch}' (general.architecture) is not supported; lucent reads {known:?}",
            f.path().display()
        ))
    })
}

/// The Hugging Face encoder families lucent reads, by `config.json`'s `model_type`.
pub const HF_ENCODER_TYPES: &[&str] = &["bert", "roberta", "xlm-roberta", "mpnet", "distilbert"];

/// Load a Hugging Face encoder folder by its `config.json` `model_type`
/// ([`HF_ENCODER_TYPES`]); any other type is refused naming the field and the types
/// lucent reads.
pub fn load_hf_encoder(dir: &std::path::Path) -> Result<crate::model::EncoderModel> {
    let path = dir.join("config.json");
    let model_type = hf_model_type(&path)?;
    match model_type.as_deref() {
        Some("bert" | "roberta" | "xlm-roberta") | None => bert::load_model(dir),
        Some("mpnet") => mpnet::load_model(dir),
        Some("distilbert") => distilbert::load_model(dir),
        Some(other) => Err(Error::format(
            &path,
            format!(
                "model_type '{other}' is not an encoder lucent reads; model_type must be one of {HF_ENCODER_TYPES:?}"
            ),
        )),
    }
}

/// `model_type` of a Hugging Face `config.json` (None when the field is absent).
pub fn hf_model_type(path: &std::path::Path) -> Result<Option<String>> {
    #[derive(serde::Deserialize)]
    struct Head {
        model_type: Option<String>,
    }
    if !path.is_file() {
        return Err(Error::Argument(format!(
            "{} does not exist; a Hugging Face model folder has config.json, model.safetensors and tokenizer.json",
            path.display()
        )));
    }
    let len = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    if len > bert::MAX_CONFIG_BYTES {
        return Err(Error::format(
            path,
            format!(
                "config.json is {len} bytes; lucent reads at most {} bytes",
                bert::MAX_CONFIG_BYTES
            ),
        ));
    }
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let head: Head = serde_json::from_slice(&text)
        .map_err(|e| Error::format(path, format!("not a valid config.json: {e}")))?;
    Ok(head.model_type)
}

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
    /// W_g, the router of a mixture of experts (n_experts, d).
    FfnRouterWeight,
    /// Every expert's W_gate, stacked (n_experts, d_ff_expert, d).
    FfnGateExpsWeight,
    /// Every expert's W_up, stacked (n_experts, d_ff_expert, d).
    FfnUpExpsWeight,
    /// Every expert's W_down, stacked (n_experts, d, d_ff_expert).
    FfnDownExpsWeight,
    /// γ of the QK-norm over each query head (d_k), or over all of them (h·d_k) with
    /// `qk_norm_whole`.
    QueryNormWeight,
    /// γ of the QK-norm over each key head (d_k), or over all of them (h_kv·d_k) with
    /// `qk_norm_whole`.
    KeyNormWeight,
    /// γ of the norm on the attention's output (sandwich placement) (d).
    AttnPostNormWeight,
    /// γ of the norm on the feed-forward network's output (sandwich placement) (d).
    FfnPostNormWeight,
    /// γ of the norm after the last layer (d).
    FinalNormWeight,
    /// RoPE's frequency factors fᵢ (d_k/2), dividing the angles (Llama 3.1's
    /// `rope_freqs.weight`); one tensor shared by every layer.
    RopeFreqFactors,
    /// β of the norm after the last layer (d), for a LayerNorm.
    FinalNormBias,
    /// The output head W_vocab (V, d), when not tied to the token embedding.
    OutputWeight,
    /// BERT's pooler W_p (d, d).
    PoolerWeight,
    /// BERT's pooler b_p (d).
    PoolerBias,
    /// The relative-position bias table B (buckets, h), shared by all layers (MPNet).
    /// Its bucket count is the family's, so [`Param::shape`] gives MPNet's 32 and a
    /// family with another count reads it with [`Weights::get_shaped`].
    RelativeAttentionBias,
    /// Cross-attention W_q (h·d_k, d): queries from the decoder.
    CrossQueryWeight,
    /// Cross-attention b_q (h·d_k).
    CrossQueryBias,
    /// Cross-attention W_k (h_kv·d_k, d): keys of the encoder output.
    CrossKeyWeight,
    /// Cross-attention b_k (h_kv·d_k).
    CrossKeyBias,
    /// Cross-attention W_v (h_kv·d_k, d): values of the encoder output.
    CrossValueWeight,
    /// Cross-attention b_v (h_kv·d_k).
    CrossValueBias,
    /// Cross-attention W_o (d, h·d_k).
    CrossOutWeight,
    /// Cross-attention b_o (d).
    CrossOutBias,
    /// γ of the norm around cross-attention (d).
    CrossNormWeight,
    /// β of the norm around cross-attention (d).
    CrossNormBias,
}

/// The experts' shape of a config without experts (their parameters are then empty).
const NO_EXPERTS: crate::model::ExpertsConfig = crate::model::ExpertsConfig {
    n_experts: 0,
    top_k: 0,
    d_ff: 0,
    normalize_weights: false,
};

impl Param {
    /// The shape this parameter must have under `cfg`.
    pub fn shape(self, cfg: &ModelConfig) -> Vec<usize> {
        let d = cfg.d_model;
        use Param::*;
        match self {
            TokenEmbedding | OutputWeight => vec![cfg.vocab_size, d],
            PoolerWeight => vec![d, d],
            PoolerBias => vec![d],
            RelativeAttentionBias => vec![32, cfg.n_heads],
            FfnGateWeight => vec![cfg.d_ff, d],
            FfnRouterWeight => vec![cfg.experts.map_or(0, |e| e.n_experts), d],
            FfnGateExpsWeight | FfnUpExpsWeight => {
                let e = cfg.experts.unwrap_or(NO_EXPERTS);
                vec![e.n_experts, e.d_ff, d]
            }
            FfnDownExpsWeight => {
                let e = cfg.experts.unwrap_or(NO_EXPERTS);
                vec![e.n_experts, d, e.d_ff]
            }
            RopeFreqFactors => vec![cfg.head_dim / 2],
            QueryNormWeight if cfg.qk_norm_whole => vec![cfg.q_dim()],
            KeyNormWeight if cfg.qk_norm_whole => vec![cfg.kv_dim()],
            QueryNormWeight | KeyNormWeight => vec![cfg.head_dim],
            AttnPostNormWeight | FfnPostNormWeight | FinalNormWeight | FinalNormBias => vec![d],
            PositionEmbedding => vec![cfg.max_positions, d],
            TokenTypeEmbedding => vec![cfg.type_vocab_size, d],
            QueryWeight | CrossQueryWeight => vec![cfg.q_dim(), d],
            QueryBias | CrossQueryBias => vec![cfg.q_dim()],
            KeyWeight | ValueWeight | CrossKeyWeight | CrossValueWeight => vec![cfg.kv_dim(), d],
            KeyBias | ValueBias | CrossKeyBias | CrossValueBias => vec![cfg.kv_dim()],
            AttnOutWeight | CrossOutWeight => vec![d, cfg.q_dim()],
            FfnUpWeight => vec![cfg.d_ff, d],
            FfnUpBias => vec![cfg.d_ff],
            FfnDownWeight => vec![d, cfg.d_ff],
            EmbeddingNormWeight | EmbeddingNormBias | AttnOutBias | AttnNormWeight
            | AttnNormBias | FfnDownBias | FfnNormWeight | FfnNormBias | CrossOutBias
            | CrossNormWeight | CrossNormBias => vec![d],
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
                | FinalNormBias
                | RopeFreqFactors
                | OutputWeight
                | PoolerWeight
                | PoolerBias
                | RelativeAttentionBias
        )
    }
}

/// A family's weight-name table: the checkpoint key of each role, `{i}` standing for
/// the layer index, and an optional prefix that some checkpoints put in front of every
/// key (e.g. `bert.` in a BertForMaskedLM file).
///
/// Several roles under one key are one fused matrix holding their matrices stacked by
/// rows, in the table's order (Phi-3's `attn_qkv`: W_q, then W_k, then W_v): each role
/// reads its own row range ([`NameTable::stacked`]), so the generic model sees the
/// separate matrices.
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

    /// For a role that shares its key with others (a fused matrix): its first row and
    /// the fused matrix's row count under `cfg` (rows from [`Param::shape`], in the
    /// table's order); `None` for a role with a key of its own.
    pub fn stacked(&self, param: Param, cfg: &ModelConfig) -> Option<(usize, usize)> {
        let key = self.pattern(param)?;
        let parts: Vec<Param> = self
            .keys
            .iter()
            .filter(|(_, k)| *k == key)
            .map(|(p, _)| *p)
            .collect();
        if parts.len() < 2 {
            return None;
        }
        let rows = |p: Param| p.shape(cfg).first().copied().unwrap_or(0);
        let first = parts
            .iter()
            .take_while(|p| **p != param)
            .map(|p| rows(*p))
            .sum();
        Some((first, parts.iter().map(|p| rows(*p)).sum()))
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

/// Where a generic model's builder reads its parameters: a checkpoint seen through a
/// family's name table, with the shapes a [`ModelConfig`] expects. Every read is noted,
/// so that after building, [`WeightSource::unused`] names the checkpoint's tensors the
/// model did not take (ARCHITECTURE.md, principle 7: a checkpoint whose tensors are not
/// all used is an error, not a model that silently computes something else).
pub trait WeightSource {
    /// The checkpoint key of `param` in layer `layer` (ignored for global parameters).
    fn key(&self, param: Param, layer: usize) -> Result<String>;
    /// Whether the checkpoint holds `param` (for optional parameters).
    fn has(&self, param: Param, layer: usize) -> bool;
    /// A matrix parameter, checked against the config's shape: quantised blocks stay
    /// quantised where the file has them.
    fn matrix(&self, param: Param, layer: usize) -> Result<Weight>;
    /// A parameter as f32 (dequantised if stored quantised), checked against the shape.
    fn tensor(&self, param: Param, layer: usize) -> Result<Tensor>;
    /// A stack of matrices, one per expert (`param` of shape (n_experts, rows, cols)),
    /// checked against the config's shape: quantised blocks stay quantised. Only GGUF
    /// files hold experts; other formats refuse, naming the parameter.
    fn experts(&self, param: Param, layer: usize) -> Result<Vec<Weight>> {
        Err(Error::Weights(format!(
            "{}: {param:?} of layer {layer}: lucent reads experts' weights from GGUF files only",
            self.path().display()
        )))
    }
    /// The checkpoint's tensors never read, sorted.
    fn unused(&self) -> Vec<String>;
    /// The checkpoint's path, for messages.
    fn path(&self) -> &std::path::Path;

    /// Fail naming the unused tensors, if any (called after a model is built).
    fn check_all_used(&self) -> Result<()> {
        let unused = self.unused();
        if unused.is_empty() {
            return Ok(());
        }
        let shown: Vec<&str> = unused.iter().take(8).map(String::as_str).collect();
        Err(Error::Weights(format!(
            "{}: {} tensor(s) of the checkpoint are not used by the model its config describes: {shown:?}{}; \
             lucent would compute something else than the checkpoint's authors did, so it refuses to load it",
            self.path().display(),
            unused.len(),
            if unused.len() > shown.len() { " …" } else { "" }
        )))
    }
}

/// Which keys of a checkpoint have been read (shared by the views of one file, e.g. the
/// encoder's and the decoder's of a Whisper model).
#[derive(Default)]
pub struct UsedKeys(std::sync::Mutex<std::collections::HashSet<String>>);

impl UsedKeys {
    /// Note `key` as read.
    pub fn note(&self, key: &str) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(key.to_string());
        }
    }

    /// The keys of `all` never noted, sorted.
    pub fn unused<'k>(&self, all: impl Iterator<Item = &'k str>) -> Vec<String> {
        let used = match self.0.lock() {
            Ok(s) => s.clone(),
            Err(_) => Default::default(),
        };
        let mut out: Vec<String> = all
            .filter(|k| !used.contains(*k))
            .map(str::to_string)
            .collect();
        out.sort();
        out
    }
}

/// A safetensors file read through a family's name table, with the shapes of a config.
pub struct Weights<'a> {
    file: &'a SafetensorsFile,
    table: &'a NameTable,
    cfg: &'a ModelConfig,
    prefix: &'static str,
    used: UsedKeys,
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
            used: UsedKeys::default(),
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
        self.get_shaped(param, layer, &param.shape(self.cfg))
    }

    /// [`Weights::get`] with the expected shape given (for a parameter whose shape
    /// depends on more than the [`ModelConfig`], such as the relative-position table).
    pub fn get_shaped(&self, param: Param, layer: usize, want: &[usize]) -> Result<Tensor> {
        let key = self.key(param, layer)?;
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
            Some(_) => {
                self.used.note(&key);
                self.file.tensor(&key)
            }
        }
    }

    /// Count the checkpoint entry `key` (with this file's prefix) as used without reading
    /// it: for buffers that are not parameters, such as `embeddings.position_ids`.
    pub fn skip(&self, key: &str) {
        self.used.note(&format!("{}{key}", self.prefix));
    }
}

impl WeightSource for Weights<'_> {
    fn key(&self, param: Param, layer: usize) -> Result<String> {
        Weights::key(self, param, layer)
    }

    fn has(&self, param: Param, layer: usize) -> bool {
        Weights::has(self, param, layer)
    }

    fn matrix(&self, param: Param, layer: usize) -> Result<Weight> {
        Ok(Weight::F32(self.get(param, layer)?))
    }

    fn tensor(&self, param: Param, layer: usize) -> Result<Tensor> {
        self.get(param, layer)
    }

    fn unused(&self) -> Vec<String> {
        self.used.unused(self.file.names())
    }

    fn path(&self) -> &std::path::Path {
        self.file.path()
    }
}

/// A GGUF file read through a family's name table, with the shapes of a config.
/// Matrices come back as [`Weight`]s that keep the file's quantised blocks (memory-mapped,
/// not copied); vectors (norm weights) as f32 tensors.
pub struct GgufWeights<'a> {
    file: &'a GgufFile,
    table: &'a NameTable,
    cfg: &'a ModelConfig,
    used: UsedKeys,
}

impl<'a> GgufWeights<'a> {
    /// Read `file` through `table` with the shapes of `cfg`.
    pub fn new(file: &'a GgufFile, table: &'a NameTable, cfg: &'a ModelConfig) -> Self {
        GgufWeights {
            file,
            table,
            cfg,
            used: UsedKeys::default(),
        }
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

    /// A matrix parameter, checked against the config's shape, kept in the file's type
    /// (quantised blocks or F32 / F16 / BF16 numbers, memory-mapped, never widened) and
    /// multiplied in llama.cpp's order for that type. Rows of a fused tensor (phi3's QKV,
    /// gate-up) keep the whole tensor's row count, which llama.cpp's product sees
    /// ([`QMatrix::part_of`]).
    pub fn matrix(&self, param: Param, layer: usize) -> Result<Weight> {
        let key = self.key(param, layer)?;
        let want = param.shape(self.cfg);
        let [rows, cols] = [want[0], want[1]];
        self.file.tensor(&key)?;
        self.used.note(&key);
        if let Some((first, total)) = self.table.stacked(param, self.cfg) {
            // One part of a fused matrix: its rows.
            return Ok(self
                .file
                .qmatrix_rows(&key, first, rows, total, cols)?
                .part_of(total)
                .into());
        }
        Ok(self.file.qmatrix_shaped(&key, rows, cols)?.into())
    }

    /// A stack of per-expert matrices (n_experts, rows, cols), checked against the
    /// config's shape: each expert's rows a window of the file's bytes, in the file's type
    /// (mapped, never widened), multiplied as llama.cpp's `mul_mat_id` does
    /// ([`QMatrix::expert`]).
    pub fn experts(&self, param: Param, layer: usize) -> Result<Vec<Weight>> {
        let key = self.key(param, layer)?;
        let want = param.shape(self.cfg);
        let [n, rows, cols] = want[..] else {
            return Err(Error::Weights(format!(
                "{key}: {param:?} is not a stack of expert matrices"
            )));
        };
        self.file.tensor(&key)?;
        self.used.note(&key);
        Ok(self
            .file
            .qmatrix_stack_shaped(&key, n, rows, cols)?
            .into_iter()
            .map(|m| Weight::from(m.expert()))
            .collect())
    }

    /// A vector or matrix parameter as f32 (dequantised if stored quantised).
    pub fn tensor(&self, param: Param, layer: usize) -> Result<Tensor> {
        let key = self.key(param, layer)?;
        let want = param.shape(self.cfg);
        let t = match self.table.stacked(param, self.cfg) {
            // One part of a fused matrix: its rows.
            Some((first, total)) => {
                let mut shape = want.clone();
                shape[0] = total;
                self.file
                    .tensor_f32_shaped(&key, &shape)?
                    .narrow(0, first, want[0])?
            }
            None => self.file.tensor_f32_shaped(&key, &want)?,
        };
        self.used.note(&key);
        Ok(t)
    }
}

impl WeightSource for GgufWeights<'_> {
    fn key(&self, param: Param, layer: usize) -> Result<String> {
        GgufWeights::key(self, param, layer)
    }

    fn has(&self, param: Param, layer: usize) -> bool {
        GgufWeights::has(self, param, layer)
    }

    fn matrix(&self, param: Param, layer: usize) -> Result<Weight> {
        GgufWeights::matrix(self, param, layer)
    }

    fn tensor(&self, param: Param, layer: usize) -> Result<Tensor> {
        GgufWeights::tensor(self, param, layer)
    }

    fn experts(&self, param: Param, layer: usize) -> Result<Vec<Weight>> {
        GgufWeights::experts(self, param, layer)
    }

    fn unused(&self) -> Vec<String> {
        self.used
            .unused(self.file.tensor_infos().iter().map(|t| t.name.as_str()))
    }

    fn path(&self) -> &std::path::Path {
        self.file.path()
    }
}
