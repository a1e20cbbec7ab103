//! GPT-2 in Hugging Face's layout (`model_type: "gpt2"`, the safetensors of
//! `GPT2LMHeadModel` or `GPT2Model`): a config translation, one name table with each
//! tensor's layout, and the same table read backwards, so that a [`DecoderModel`] (a
//! model `lucent train lm` made) is written as a folder `transformers` loads
//! (`lucent export hf`) and read back here.
//!
//! GPT-2 is the generic decoder with learned absolute positions, pre-norm LayerNorm
//! (ε = `layer_norm_epsilon`), a tanh-GELU MLP (`gelu_new`) of width `n_inner` (4d when
//! null), biases everywhere, a final LayerNorm (`ln_f`) and a head tied to the token
//! embedding (Radford et al. 2019; `transformers`' `modeling_gpt2.py` for the names).
//!
//! Two things differ from lucent's layout (nn.Linear's (out, in) matrices), both written
//! once, in [`NAMES`]:
//!
//! - GPT-2's projections are `Conv1D` modules whose weight is stored (in, out): the
//!   transpose ([`Layout::Conv1D`]);
//! - Q, K and V are one fused projection `attn.c_attn` of (d, 3d): columns [0, d) are
//!   Q, [d, 2d) K and [2d, 3d) V, the bias split the same way ([`Layout::Qkv`]).
//!
//! Checkpoints written by older `transformers` also hold each layer's causal mask as a
//! buffer (`attn.bias`, `attn.masked_bias`); lucent builds that mask itself, so these
//! two are read past ([`BUFFERS`]). Anything else in the file that the config does not
//! explain is an error (principle 7), as are the config fields lucent cannot honour
//! (`scale_attn_by_inverse_layer_idx`, `scale_attn_weights: false`, cross-attention).

use std::path::Path;

use serde::Deserialize;

use super::{Param, UsedKeys, WeightSource};
use crate::io::SafetensorsFile;
use crate::model::{
    DecoderModel, FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind,
};
use crate::nn::Weight;
use crate::ops::Activation;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The fields of a Hugging Face GPT-2 `config.json` that lucent reads.
#[derive(Clone, Debug, Deserialize)]
pub struct HfGpt2Config {
    /// `"gpt2"`.
    #[serde(default)]
    pub model_type: Option<String>,
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Rows of the position table (the context).
    pub n_positions: usize,
    /// Width d.
    pub n_embd: usize,
    /// Layers N.
    pub n_layer: usize,
    /// Heads h.
    pub n_head: usize,
    /// Feed-forward width (null: 4d).
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// The MLP's nonlinearity (`gelu_new` = tanh-GELU).
    #[serde(default = "default_act")]
    pub activation_function: String,
    /// ε of every LayerNorm.
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    /// Whether the head is the token embedding (GPT-2: yes).
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// Scores divided by √d_k (GPT-2: yes; lucent reads only that).
    #[serde(default = "yes")]
    pub scale_attn_weights: bool,
    /// Scores also divided by the layer's index + 1 (not supported).
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
    /// Cross-attention in every layer (an encoder-decoder's decoder; not supported).
    #[serde(default)]
    pub add_cross_attention: bool,
}

fn default_act() -> String {
    "gelu_new".into()
}
fn default_eps() -> f64 {
    1e-5
}
fn yes() -> bool {
    true
}

/// Parse a GPT-2 `config.json`.
pub fn read_config(path: &Path) -> Result<HfGpt2Config> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::format(
            path,
            format!("not a GPT-2 config.json ({e}); it needs vocab_size, n_positions, n_embd, n_layer, n_head"),
        )
    })
}

/// Translate a GPT-2 config into the generic [`ModelConfig`] (validated); the fields
/// lucent cannot honour are refused by name.
pub fn config(hf: &HfGpt2Config) -> Result<ModelConfig> {
    if let Some(t) = &hf.model_type {
        if t != "gpt2" {
            return Err(Error::Config(format!(
                "model_type '{t}' is not GPT-2; this reader takes model_type \"gpt2\""
            )));
        }
    }
    if !hf.scale_attn_weights {
        return Err(Error::Config(
            "scale_attn_weights: false (unscaled attention scores) is not supported; lucent scales by 1/√d_k".into(),
        ));
    }
    if hf.scale_attn_by_inverse_layer_idx {
        return Err(Error::Config(
            "scale_attn_by_inverse_layer_idx: true is not supported (scores divided by the layer index)".into(),
        ));
    }
    if hf.add_cross_attention {
        return Err(Error::Config(
            "add_cross_attention: true (a GPT-2 decoder with cross-attention) is not supported"
                .into(),
        ));
    }
    let cfg = ModelConfig {
        family: "gpt2".into(),
        kind: ModelKind::Decoder,
        vocab_size: hf.vocab_size,
        d_model: hf.n_embd,
        encoder_layers: 0,
        decoder_layers: hf.n_layer,
        n_heads: hf.n_head,
        n_kv_heads: hf.n_head,
        head_dim: ModelConfig::head_dim_for(hf.n_embd, hf.n_head)?,
        d_ff: hf.n_inner.unwrap_or(4 * hf.n_embd),
        max_positions: hf.n_positions,
        type_vocab_size: 0,
        position: PositionKind::Learned,
        norm: NormKind::LayerNorm,
        norm_placement: NormPlacement::Pre,
        norm_eps: hf.layer_norm_epsilon as f32,
        embedding_norm: false,
        final_norm: true,
        ffn: FfnKind::Mlp,
        activation: super::bert::activation(&hf.activation_function)?,
        qkv_bias: true,
        attn_out_bias: true,
        ffn_bias: true,
        norm_bias: true,
        qk_norm: false,
        tie_embeddings: hf.tie_word_embeddings,
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
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The `config.json` of a GPT-2 folder holding a model of config `cfg`; errors name
/// the field GPT-2's layout cannot express (GPT-2 is one particular decoder: learned
/// positions, pre-norm LayerNorm with biases, a plain MLP, multi-head attention).
pub fn hf_config(cfg: &ModelConfig) -> Result<serde_json::Value> {
    cfg.validate()?;
    let refuse = |field: &str, what: String| {
        Err(Error::Config(format!(
            "{field}: {what}; a Hugging Face GPT-2 folder cannot hold it (family {})",
            cfg.family
        )))
    };
    if cfg.kind != ModelKind::Decoder {
        return refuse("kind", format!("{:?} (GPT-2 is a decoder)", cfg.kind));
    }
    if cfg.position != PositionKind::Learned {
        return refuse(
            "position",
            format!("{:?} (GPT-2 learns its positions)", cfg.position),
        );
    }
    if cfg.norm != NormKind::LayerNorm || cfg.norm_placement != NormPlacement::Pre || !cfg.norm_bias
    {
        return refuse(
            "norm",
            format!(
                "{:?} {:?} (GPT-2: pre-norm LayerNorm with β)",
                cfg.norm, cfg.norm_placement
            ),
        );
    }
    if !cfg.final_norm || cfg.embedding_norm || cfg.qk_norm {
        return refuse(
            "final_norm / embedding_norm / qk_norm",
            "other norms than GPT-2's".into(),
        );
    }
    if cfg.ffn != FfnKind::Mlp || !cfg.ffn_bias || !cfg.qkv_bias || !cfg.attn_out_bias {
        return refuse("ffn / biases", "a gated FFN or missing biases".into());
    }
    if cfg.n_kv_heads != cfg.n_heads || cfg.head_dim * cfg.n_heads != cfg.d_model {
        return refuse(
            "n_kv_heads / head_dim",
            format!("{} kv heads of {} features", cfg.n_kv_heads, cfg.head_dim),
        );
    }
    if cfg.embedding_scale != 1.0
        || cfg.sliding_window.is_some()
        || cfg.attention_scale.is_some()
        || cfg.type_vocab_size != 0
        || cfg.pooler
    {
        return refuse(
            "embedding_scale / sliding_window / attention_scale / type_vocab_size / pooler",
            "settings GPT-2 does not have".into(),
        );
    }
    if cfg.attn_softcap.is_some()
        || cfg.final_softcap.is_some()
        || cfg.residual_scale.is_some()
        || cfg.logit_scale.is_some()
    {
        return refuse(
            "attn_softcap / final_softcap / residual_scale / logit_scale",
            "settings GPT-2 does not have".into(),
        );
    }
    let activation = match cfg.activation {
        Activation::GeluTanh => "gelu_new",
        Activation::Gelu => "gelu",
        Activation::Relu => "relu",
        Activation::Silu => "silu",
    };
    // ε as its shortest decimal (1e-5, not the f32's 9.99999974e-6 widened to f64).
    let eps: f64 = cfg
        .norm_eps
        .to_string()
        .parse()
        .unwrap_or(f64::from(cfg.norm_eps));
    Ok(serde_json::json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.max_positions,
        "n_ctx": cfg.max_positions,
        "n_embd": cfg.d_model,
        "n_layer": cfg.decoder_layers,
        "n_head": cfg.n_heads,
        "n_inner": cfg.d_ff,
        "activation_function": activation,
        "layer_norm_epsilon": eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "scale_attn_weights": true,
        "scale_attn_by_inverse_layer_idx": false,
        "reorder_and_upcast_attn": false,
        "add_cross_attention": false,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "bos_token_id": null,
        "eos_token_id": null,
        "torch_dtype": "float32",
    }))
}

/// How a parameter sits in a GPT-2 checkpoint, relative to lucent's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// As lucent holds it (embeddings, norms, biases of their own).
    AsIs,
    /// A `Conv1D` weight, stored (in, out): the transpose of lucent's (out, in).
    Conv1D,
    /// Part `k` (0 = Q, 1 = K, 2 = V) of the fused `c_attn`: for the weight, columns
    /// [k·d, (k+1)·d) of the (d, 3d) matrix, transposed; for the bias, that third.
    Qkv(usize),
}

/// Whether a key sits under the model's prefix (`transformer.` in a GPT2LMHeadModel
/// file) or at the top (`lm_head.weight`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Under `transformer.` (or bare, in a GPT2Model file).
    Body,
    /// At the top of the file.
    Top,
}

/// Every GPT-2 parameter: role, key (`{i}` = layer), layout, scope.
pub const NAMES: &[(Param, &str, Layout, Scope)] = &[
    (
        Param::TokenEmbedding,
        "wte.weight",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::PositionEmbedding,
        "wpe.weight",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::AttnNormWeight,
        "h.{i}.ln_1.weight",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::AttnNormBias,
        "h.{i}.ln_1.bias",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::QueryWeight,
        "h.{i}.attn.c_attn.weight",
        Layout::Qkv(0),
        Scope::Body,
    ),
    (
        Param::KeyWeight,
        "h.{i}.attn.c_attn.weight",
        Layout::Qkv(1),
        Scope::Body,
    ),
    (
        Param::ValueWeight,
        "h.{i}.attn.c_attn.weight",
        Layout::Qkv(2),
        Scope::Body,
    ),
    (
        Param::QueryBias,
        "h.{i}.attn.c_attn.bias",
        Layout::Qkv(0),
        Scope::Body,
    ),
    (
        Param::KeyBias,
        "h.{i}.attn.c_attn.bias",
        Layout::Qkv(1),
        Scope::Body,
    ),
    (
        Param::ValueBias,
        "h.{i}.attn.c_attn.bias",
        Layout::Qkv(2),
        Scope::Body,
    ),
    (
        Param::AttnOutWeight,
        "h.{i}.attn.c_proj.weight",
        Layout::Conv1D,
        Scope::Body,
    ),
    (
        Param::AttnOutBias,
        "h.{i}.attn.c_proj.bias",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::FfnNormWeight,
        "h.{i}.ln_2.weight",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::FfnNormBias,
        "h.{i}.ln_2.bias",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::FfnUpWeight,
        "h.{i}.mlp.c_fc.weight",
        Layout::Conv1D,
        Scope::Body,
    ),
    (
        Param::FfnUpBias,
        "h.{i}.mlp.c_fc.bias",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::FfnDownWeight,
        "h.{i}.mlp.c_proj.weight",
        Layout::Conv1D,
        Scope::Body,
    ),
    (
        Param::FfnDownBias,
        "h.{i}.mlp.c_proj.bias",
        Layout::AsIs,
        Scope::Body,
    ),
    (
        Param::FinalNormWeight,
        "ln_f.weight",
        Layout::AsIs,
        Scope::Body,
    ),
    (Param::FinalNormBias, "ln_f.bias", Layout::AsIs, Scope::Body),
    (
        Param::OutputWeight,
        "lm_head.weight",
        Layout::AsIs,
        Scope::Top,
    ),
];

/// Buffers some GPT-2 checkpoints store beside the parameters: each layer's causal
/// mask, which lucent builds itself.
pub const BUFFERS: &[&str] = &["h.{i}.attn.bias", "h.{i}.attn.masked_bias"];

/// The prefix of the model body in a `GPT2LMHeadModel` file (bare in `GPT2Model`'s).
pub const BODY_PREFIXES: &[&str] = &["transformer.", ""];

/// The entry of `param` in [`NAMES`].
fn entry(param: Param) -> Option<&'static (Param, &'static str, Layout, Scope)> {
    NAMES.iter().find(|(p, ..)| *p == param)
}

/// (rows, cols) of a 2-D shape, or an error naming the key.
fn matrix_dims(key: &str, t: &Tensor) -> Result<(usize, usize)> {
    match t.shape() {
        [r, c] => Ok((*r, *c)),
        s => Err(Error::Weights(format!(
            "tensor '{key}' has shape {s:?}; a matrix was expected"
        ))),
    }
}

/// A GPT-2 safetensors file read through [`NAMES`], with the shapes of a config.
pub struct Gpt2Weights<'a> {
    file: &'a SafetensorsFile,
    cfg: &'a ModelConfig,
    prefix: &'static str,
    used: UsedKeys,
}

impl<'a> Gpt2Weights<'a> {
    /// Match `file` to GPT-2's names: find the prefix under which `wte.weight` is
    /// stored; an error if none (not a GPT-2 checkpoint).
    pub fn new(file: &'a SafetensorsFile, cfg: &'a ModelConfig) -> Result<Self> {
        let prefix = BODY_PREFIXES
            .iter()
            .find(|p| file.entry(&format!("{p}wte.weight")).is_some())
            .ok_or_else(|| {
                let some: Vec<&str> = file.names().take(5).collect();
                Error::Weights(format!(
                    "{}: no tensor 'wte.weight' (with any of the prefixes {BODY_PREFIXES:?}): this is not a GPT-2 checkpoint (its first keys are {some:?})",
                    file.path().display()
                ))
            })?;
        let w = Gpt2Weights {
            file,
            cfg,
            prefix,
            used: UsedKeys::default(),
        };
        for layer in 0..cfg.decoder_layers {
            for b in BUFFERS {
                let key = format!("{prefix}{}", b.replace("{i}", &layer.to_string()));
                if file.entry(&key).is_some() {
                    w.used.note(&key);
                }
            }
        }
        Ok(w)
    }

    /// The tensor under `key`, noted as used, checked to have `want` elements.
    fn stored(&self, key: &str, param: Param) -> Result<Tensor> {
        let t = self.file.tensor(key).map_err(|_| {
            Error::Weights(format!(
                "{}: missing tensor '{key}' ({param:?}); the file does not match its config.json",
                self.file.path().display()
            ))
        })?;
        self.used.note(key);
        Ok(t)
    }

    /// `param` of `layer` in lucent's layout, checked against the config's shape.
    fn read(&self, param: Param, layer: usize) -> Result<Tensor> {
        let key = WeightSource::key(self, param, layer)?;
        let (_, _, layout, _) =
            *entry(param).ok_or_else(|| Error::Weights(format!("GPT-2 has no {param:?}")))?;
        let want = param.shape(self.cfg);
        let stored = self.stored(&key, param)?;
        let d = self.cfg.d_model;
        let t = match (layout, want.len()) {
            (Layout::AsIs, _) => stored,
            (Layout::Conv1D, _) => {
                matrix_dims(&key, &stored)?;
                stored.transpose(0, 1)? // (in, out) → (out, in)
            }
            (Layout::Qkv(k), 2) => {
                let (_, cols) = matrix_dims(&key, &stored)?;
                if cols != 3 * d {
                    return Err(Error::Weights(format!(
                        "{}: tensor '{key}' has shape {:?}; a fused Q, K, V of (d, 3d) = ({d}, {}) was expected",
                        self.file.path().display(),
                        stored.shape(),
                        3 * d
                    )));
                }
                stored.narrow(1, k * d, d)?.transpose(0, 1)? // (d, 3d) → (d, d) → (out, in)
            }
            (Layout::Qkv(k), _) => {
                if stored.shape() != [3 * d] {
                    return Err(Error::Weights(format!(
                        "{}: tensor '{key}' has shape {:?}; a fused Q, K, V bias of 3d = {} was expected",
                        self.file.path().display(),
                        stored.shape(),
                        3 * d
                    )));
                }
                stored.narrow(0, k * d, d)? // (3d) → (d)
            }
        };
        if t.shape() != want.as_slice() {
            return Err(Error::Weights(format!(
                "{}: tensor '{key}' gives {param:?} the shape {:?}, expected {want:?} from config.json; the weights and the config disagree",
                self.file.path().display(),
                t.shape()
            )));
        }
        Ok(t)
    }
}

impl WeightSource for Gpt2Weights<'_> {
    fn key(&self, param: Param, layer: usize) -> Result<String> {
        let (_, pattern, _, scope) = entry(param).ok_or_else(|| {
            Error::Weights(format!("the gpt2 name table has no entry for {param:?}"))
        })?;
        let key = pattern.replace("{i}", &layer.to_string());
        Ok(match scope {
            Scope::Body => format!("{}{key}", self.prefix),
            Scope::Top => key,
        })
    }

    fn has(&self, param: Param, layer: usize) -> bool {
        WeightSource::key(self, param, layer).is_ok_and(|k| self.file.entry(&k).is_some())
    }

    fn matrix(&self, param: Param, layer: usize) -> Result<Weight> {
        Ok(Weight::F32(self.read(param, layer)?))
    }

    fn tensor(&self, param: Param, layer: usize) -> Result<Tensor> {
        self.read(param, layer)
    }

    fn unused(&self) -> Vec<String> {
        self.used.unused(self.file.names())
    }

    fn path(&self) -> &Path {
        self.file.path()
    }
}

/// Load a Hugging Face GPT-2 folder (`config.json`, `model.safetensors`) as the generic
/// [`DecoderModel`]; every tensor of the file must be used. A tied model's file may
/// also hold `lm_head.weight`, which must then equal `wte.weight`.
pub fn load_model(dir: &Path) -> Result<DecoderModel> {
    let config_path = dir.join("config.json");
    let cfg = config(&read_config(&config_path)?).map_err(|e| match e {
        Error::Config(msg) => Error::format(&config_path, msg),
        other => other,
    })?;
    let file = SafetensorsFile::open(dir.join("model.safetensors"))?;
    let w = Gpt2Weights::new(&file, &cfg)?;
    let model = DecoderModel::load(cfg.clone(), &w)?;
    if cfg.tie_embeddings && w.has(Param::OutputWeight, 0) {
        let head = w.read(Param::OutputWeight, 0)?;
        let table = w.read(Param::TokenEmbedding, 0)?;
        if head.data() != table.data() {
            return Err(Error::Weights(format!(
                "{}: tie_word_embeddings is true but lm_head.weight differs from wte.weight; set it to false in config.json",
                file.path().display()
            )));
        }
    }
    w.check_all_used()?;
    Ok(model)
}

/// The tensors of `model` under GPT-2's keys (`transformer.` prefix, `GPT2LMHeadModel`'s
/// layout: Conv1D weights (in, out), Q, K, V fused), sorted by key; a tied head is not
/// written (as `transformers` saves it). Errors name the parameter GPT-2 cannot hold.
pub fn export_tensors(model: &DecoderModel) -> Result<Vec<(String, Tensor)>> {
    hf_config(&model.config)?;
    let cfg = &model.config;
    let get = |p: Param, layer: usize| -> Result<Tensor> {
        model.parameter(p, layer)?.ok_or_else(|| {
            Error::Config(format!(
                "the model has no {p:?} (layer {layer}), which GPT-2 needs"
            ))
        })
    };
    let mut out: Vec<(String, Tensor)> = Vec::new();
    let key = |pattern: &str, scope: Scope, layer: usize| match scope {
        Scope::Body => format!("transformer.{}", pattern.replace("{i}", &layer.to_string())),
        Scope::Top => pattern.replace("{i}", &layer.to_string()),
    };
    for &(param, pattern, layout, scope) in NAMES {
        if param == Param::OutputWeight && cfg.tie_embeddings {
            continue;
        }
        let layers = if param.per_layer() {
            cfg.decoder_layers
        } else {
            1
        };
        for layer in 0..layers {
            let name = key(pattern, scope, layer);
            match layout {
                Layout::AsIs => out.push((name, get(param, layer)?)),
                Layout::Conv1D => out.push((name, get(param, layer)?.transpose(0, 1)?)), // (out, in) → (in, out)
                // The three parts are written together, when Q comes.
                Layout::Qkv(0) => {
                    let parts = [
                        get(param, layer)?,
                        get(qkv_sibling(param, 1), layer)?,
                        get(qkv_sibling(param, 2), layer)?,
                    ];
                    out.push((name, fuse_qkv(&parts)?));
                }
                Layout::Qkv(_) => {}
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The K (k = 1) or V (k = 2) parameter beside a Q weight or bias.
fn qkv_sibling(q: Param, k: usize) -> Param {
    match (q, k) {
        (Param::QueryWeight, 1) => Param::KeyWeight,
        (Param::QueryWeight, _) => Param::ValueWeight,
        (_, 1) => Param::KeyBias,
        _ => Param::ValueBias,
    }
}

/// Q, K, V weights (out, in) → c_attn (in, 3·out) = [Qᵀ | Kᵀ | Vᵀ]; biases → [q | k | v].
fn fuse_qkv(parts: &[Tensor; 3]) -> Result<Tensor> {
    if parts[0].shape().len() == 1 {
        let v: Vec<f32> = parts
            .iter()
            .flat_map(|p| p.data().iter().copied())
            .collect();
        let n = v.len();
        return Tensor::new(v, &[n]); // (3d)
    }
    let ts: Vec<Tensor> = parts
        .iter()
        .map(|p| p.transpose(0, 1))
        .collect::<Result<_>>()?; // each (in, out)
    let (rows, cols) = matrix_dims("c_attn", &ts[0])?;
    let mut v = Vec::with_capacity(rows * cols * 3);
    for r in 0..rows {
        for t in &ts {
            v.extend_from_slice(&t.data()[r * cols..(r + 1) * cols]);
        }
    }
    Tensor::new(v, &[rows, 3 * cols]) // (in, 3·out)
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn gpt2_json(extra: &str) -> String {
        format!(
            r#"{{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":768,
            "n_layer":12,"n_head":12,"n_inner":null,"activation_function":"gelu_new",
            "layer_norm_epsilon":1e-5{extra}}}"#
        )
    }

    #[test]
    fn gpt2_small_config_translates_and_round_trips() -> TestResult {
        let hf: HfGpt2Config = serde_json::from_str(&gpt2_json(""))?;
        let c = config(&hf)?;
        assert_eq!(
            (c.d_model, c.n_heads, c.head_dim, c.d_ff),
            (768, 12, 64, 3072)
        );
        assert_eq!(c.activation, Activation::GeluTanh);
        assert!(c.tie_embeddings && c.final_norm && c.position == PositionKind::Learned);
        let back: HfGpt2Config = serde_json::from_value(hf_config(&c)?)?;
        let again = config(&back)?;
        assert_eq!(
            ModelConfig {
                family: "gpt2".into(),
                ..again
            },
            c
        );
        // Parameter count of GPT-2 small, the same as the preset's.
        let p = crate::model::params::ParamCount::of(&c)?.total();
        assert_eq!(p, 124_439_808);
        Ok(())
    }

    #[test]
    fn unsupported_fields_are_named() -> TestResult {
        for (extra, field) in [
            (
                r#","scale_attn_by_inverse_layer_idx":true"#,
                "scale_attn_by_inverse_layer_idx",
            ),
            (r#","add_cross_attention":true"#, "add_cross_attention"),
            (r#","scale_attn_weights":false"#, "scale_attn_weights"),
        ] {
            let hf: HfGpt2Config = serde_json::from_str(&gpt2_json(extra))?;
            let e = config(&hf).err().ok_or("expected an error")?.to_string();
            assert!(e.contains(field), "{e}");
        }
        let llama = crate::model::presets::preset("smollm2")?;
        let e = hf_config(&llama)
            .err()
            .ok_or("expected an error")?
            .to_string();
        assert!(e.contains("position"), "{e}");
        Ok(())
    }

    #[test]
    fn every_param_has_one_entry() {
        for (i, (p, ..)) in NAMES.iter().enumerate() {
            assert!(NAMES[i + 1..].iter().all(|(q, ..)| q != p), "{p:?} twice");
        }
    }

    #[test]
    fn fused_qkv_splits_back() -> TestResult {
        // Q, K, V of (out 2, in 3): fused (3, 6); reading part k back gives it again.
        let q = Tensor::new((0..6).map(|x| x as f32).collect(), &[2, 3])?;
        let k = Tensor::new((10..16).map(|x| x as f32).collect(), &[2, 3])?;
        let v = Tensor::new((20..26).map(|x| x as f32).collect(), &[2, 3])?;
        let fused = fuse_qkv(&[q.clone(), k.clone(), v.clone()])?;
        assert_eq!(fused.shape(), [3, 6]);
        assert_eq!(&fused.data()[..6], &[0.0, 3.0, 10.0, 13.0, 20.0, 23.0]);
        for (part, want) in [(0, &q), (1, &k), (2, &v)] {
            let back = fused.narrow(1, part * 2, 2)?.transpose(0, 1)?;
            assert_eq!(back.data(), want.data());
        }
        Ok(())
    }
}
