//! Whisper (Radford et al. 2022) as a family of the generic [`EncoderDecoderModel`]: a
//! config translation from a CTranslate2 `WhisperSpec` file and its weight-name table.
//!
//! The architecture, in the generic model's words:
//! - **front-end** ([`ConvStem`]): Conv1d(n_mels → d, kernel 3, stride 1) → GELU →
//!   Conv1d(d → d, kernel 3, stride 2) → GELU: 3000 frames of log-mel become 1500
//!   positions;
//! - **encoder**: the stored sinusoids (`encoder/position_encodings`, 1500 × d) added as
//!   the source positions, pre-norm LayerNorm layers (self-attention, GELU MLP), a final
//!   LayerNorm;
//! - **decoder**: token embedding (unscaled) plus a learned position table (448 × d),
//!   pre-norm layers of causal self-attention, cross-attention to the encoder output and
//!   the MLP, a final LayerNorm, and the output layer tied to the token embedding
//!   (`decoder/projection/weight` is an alias of `decoder/embeddings/weight`).
//!
//! CTranslate2 stores self-attention's Q, K, V fused in one `linear_0` (3d, d) and
//! cross-attention's K, V fused in `attention/linear_1` (2d, d); the name table below
//! gives each role its key and the rows of the fused matrix it takes (K's bias rows are
//! stored as zeros: Whisper's key projections have no bias). Every variable of the file
//! is used or the load fails naming it; the file's flags (`decoder/activation`,
//! `pre_norm`, `alibi`, ...) are read and any value lucent does not compute is refused
//! by name.

use std::sync::Arc;

use crate::io::ctranslate2::{Ct2File, Ct2Folder};
use crate::model::build;
use crate::model::config::{
    FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind,
};
use crate::model::encoder_decoder::Products;
use crate::model::family::{Param, UsedKeys, WeightSource};
use crate::model::EncoderDecoderModel;
use crate::nn::position::{AbsolutePositions, LearnedPositions};
use crate::nn::{Conv1d, ConvStem, Embedding, Transformer, Weight};
use crate::ops::Activation;
use crate::runtime::{Numerics, Precision};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The family's name.
pub const FAMILY: &str = "whisper";

/// Which stack a weight belongs to (the first part of every per-layer key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    /// `encoder/...`
    Encoder,
    /// `decoder/...`
    Decoder,
}

impl Stack {
    fn name(self) -> &'static str {
        match self {
            Stack::Encoder => "encoder",
            Stack::Decoder => "decoder",
        }
    }
}

/// The name table: the key of `param` in layer `layer` of `stack`, and the rows of that
/// variable it takes as (first, count) in units of d when the variable is fused.
fn key(stack: Stack, param: Param, layer: usize) -> Option<(String, Option<usize>)> {
    use Param::*;
    let s = stack.name();
    let l = format!("{s}/layer_{layer}");
    let (k, part): (String, Option<usize>) = match param {
        TokenEmbedding if stack == Stack::Decoder => (format!("{s}/embeddings/weight"), None),
        PositionEmbedding if stack == Stack::Decoder => {
            (format!("{s}/position_encodings/encodings"), None)
        }
        QueryWeight => (format!("{l}/self_attention/linear_0/weight"), Some(0)),
        KeyWeight => (format!("{l}/self_attention/linear_0/weight"), Some(1)),
        ValueWeight => (format!("{l}/self_attention/linear_0/weight"), Some(2)),
        QueryBias => (format!("{l}/self_attention/linear_0/bias"), Some(0)),
        KeyBias => (format!("{l}/self_attention/linear_0/bias"), Some(1)),
        ValueBias => (format!("{l}/self_attention/linear_0/bias"), Some(2)),
        AttnOutWeight => (format!("{l}/self_attention/linear_1/weight"), None),
        AttnOutBias => (format!("{l}/self_attention/linear_1/bias"), None),
        AttnNormWeight => (format!("{l}/self_attention/layer_norm/gamma"), None),
        AttnNormBias => (format!("{l}/self_attention/layer_norm/beta"), None),
        CrossQueryWeight => (format!("{l}/attention/linear_0/weight"), None),
        CrossQueryBias => (format!("{l}/attention/linear_0/bias"), None),
        CrossKeyWeight => (format!("{l}/attention/linear_1/weight"), Some(0)),
        CrossKeyBias => (format!("{l}/attention/linear_1/bias"), Some(0)),
        CrossValueWeight => (format!("{l}/attention/linear_1/weight"), Some(1)),
        CrossValueBias => (format!("{l}/attention/linear_1/bias"), Some(1)),
        CrossOutWeight => (format!("{l}/attention/linear_2/weight"), None),
        CrossOutBias => (format!("{l}/attention/linear_2/bias"), None),
        CrossNormWeight => (format!("{l}/attention/layer_norm/gamma"), None),
        CrossNormBias => (format!("{l}/attention/layer_norm/beta"), None),
        FfnUpWeight => (format!("{l}/ffn/linear_0/weight"), None),
        FfnUpBias => (format!("{l}/ffn/linear_0/bias"), None),
        FfnDownWeight => (format!("{l}/ffn/linear_1/weight"), None),
        FfnDownBias => (format!("{l}/ffn/linear_1/bias"), None),
        FfnNormWeight => (format!("{l}/ffn/layer_norm/gamma"), None),
        FfnNormBias => (format!("{l}/ffn/layer_norm/beta"), None),
        FinalNormWeight => (format!("{s}/layer_norm/gamma"), None),
        FinalNormBias => (format!("{s}/layer_norm/beta"), None),
        _ => return None,
    };
    Some((k, part))
}

/// The variables outside the generic roles: the front-end and the encoder's positions.
const CONV1_WEIGHT: &str = "encoder/conv1/weight";
const CONV1_BIAS: &str = "encoder/conv1/bias";
const CONV2_WEIGHT: &str = "encoder/conv2/weight";
const CONV2_BIAS: &str = "encoder/conv2/bias";
const ENCODER_POSITIONS: &str = "encoder/position_encodings/encodings";

/// A `WhisperSpec` file seen through the name table, one stack at a time, with the
/// shapes of a config. The two stacks' views share one record of used variables.
pub struct Ct2Weights<'a> {
    file: &'a Ct2File,
    cfg: &'a ModelConfig,
    stack: Stack,
    used: &'a UsedKeys,
}

impl<'a> Ct2Weights<'a> {
    /// `stack`'s weights of `file`, shaped by `cfg`, noting what is read in `used`.
    pub fn new(file: &'a Ct2File, cfg: &'a ModelConfig, stack: Stack, used: &'a UsedKeys) -> Self {
        Ct2Weights {
            file,
            cfg,
            stack,
            used,
        }
    }

    fn lookup(&self, param: Param, layer: usize) -> Result<(String, Option<usize>)> {
        key(self.stack, param, layer).ok_or_else(|| {
            Error::Weights(format!(
                "{}: the whisper name table has no {param:?} in the {}",
                self.file.path().display(),
                self.stack.name()
            ))
        })
    }

    /// A variable as f32, its rows `part·n .. (part+1)·n` when fused (n = the role's
    /// first dimension), checked against the role's shape.
    fn read(&self, param: Param, layer: usize) -> Result<Tensor> {
        let (key, part) = self.lookup(param, layer)?;
        let want = param.shape(self.cfg);
        let t = self.file.tensor(&key)?;
        let t = match part {
            None => t,
            Some(p) => {
                let n = want.first().copied().unwrap_or(0);
                let rows = t.shape().first().copied().unwrap_or(0);
                if rows < (p + 1) * n {
                    return Err(Error::Weights(format!(
                        "{}: '{key}' has shape {:?}, too few rows for part {p} of {n} ({param:?})",
                        self.file.path().display(),
                        t.shape()
                    )));
                }
                t.narrow(0, p * n, n)?
            }
        };
        if t.shape() != want.as_slice() {
            return Err(Error::Weights(format!(
                "{}: '{key}' gives {param:?} the shape {:?}, expected {want:?} from the model's dimensions",
                self.file.path().display(),
                t.shape()
            )));
        }
        self.used.note(&key);
        Ok(t)
    }
}

impl WeightSource for Ct2Weights<'_> {
    fn key(&self, param: Param, layer: usize) -> Result<String> {
        Ok(self.lookup(param, layer)?.0)
    }

    fn has(&self, param: Param, layer: usize) -> bool {
        key(self.stack, param, layer).is_some_and(|(k, _)| self.file.contains(&k))
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

    fn path(&self) -> &std::path::Path {
        self.file.path()
    }
}

/// How many `{stack}/layer_{i}/` layers the file holds (they must be numbered 0..n).
fn count_layers(file: &Ct2File, stack: Stack) -> usize {
    (0..)
        .take_while(|i| {
            let prefix = format!("{}/layer_{i}/", stack.name());
            file.names().any(|n| n.starts_with(&prefix))
        })
        .count()
}

/// The dimensions of a variable, or an error naming it.
fn dims_of(file: &Ct2File, name: &str) -> Result<Vec<usize>> {
    Ok(file.get(name)?.shape.clone())
}

/// Read an integer flag, note it as used, and check it holds `want` (`what` says what
/// lucent computes, for the message).
fn expect_flag(file: &Ct2File, used: &UsedKeys, name: &str, want: i64, what: &str) -> Result<()> {
    if !file.contains(name) {
        return Ok(());
    }
    let got = file.scalar_int(name)?;
    used.note(name);
    if got != want {
        return Err(Error::Config(format!(
            "{}: {name} is {got}; lucent's Whisper computes {what} ({name} = {want})",
            file.path().display()
        )));
    }
    Ok(())
}

/// The generic config of a `WhisperSpec` file, its flags checked (and noted in `used`).
pub fn config(file: &Ct2File, used: &UsedKeys) -> Result<ModelConfig> {
    if file.spec() != "WhisperSpec" {
        return Err(Error::format(
            file.path(),
            format!(
                "spec is '{}', not a Whisper model (WhisperSpec)",
                file.spec()
            ),
        ));
    }
    let path = file.path();
    let emb = dims_of(file, "decoder/embeddings/weight")?;
    let [vocab, d] = emb[..] else {
        return Err(Error::format(
            path,
            format!("decoder/embeddings/weight has shape {emb:?}, expected (vocab, d)"),
        ));
    };
    let pos = dims_of(file, "decoder/position_encodings/encodings")?;
    let max_positions = pos.first().copied().unwrap_or(0);
    let ffn = dims_of(file, "encoder/layer_0/ffn/linear_0/weight")?;
    let d_ff = ffn.first().copied().unwrap_or(0);
    let heads = file.scalar_int("decoder/num_heads")?;
    used.note("decoder/num_heads");
    expect_flag(
        file,
        used,
        "encoder/num_heads",
        heads,
        "the same heads in both stacks",
    )?;
    expect_flag(file, used, "decoder/activation", 3, "GELU with erf")?;
    expect_flag(file, used, "decoder/pre_norm", 1, "pre-norm layers")?;
    expect_flag(
        file,
        used,
        "decoder/scale_embeddings",
        0,
        "unscaled token embeddings",
    )?;
    expect_flag(
        file,
        used,
        "decoder/alibi",
        0,
        "learned positions, no ALiBi",
    )?;
    expect_flag(
        file,
        used,
        "decoder/start_from_zero_embedding",
        0,
        "the start token's own embedding",
    )?;
    // The generic Transformer spec's alignment defaults; Whisper's word times read
    // config.json's alignment_heads instead.
    for flag in ["decoder/alignment_layer", "decoder/alignment_heads"] {
        if file.contains(flag) {
            file.scalar_int(flag)?;
            used.note(flag);
        }
    }
    let n_heads = usize::try_from(heads)
        .ok()
        .filter(|&h| h > 0)
        .ok_or_else(|| Error::format(path, format!("decoder/num_heads is {heads}")))?;
    let cfg = ModelConfig {
        family: FAMILY.into(),
        kind: ModelKind::EncoderDecoder,
        vocab_size: vocab,
        d_model: d,
        encoder_layers: count_layers(file, Stack::Encoder),
        decoder_layers: count_layers(file, Stack::Decoder),
        n_heads,
        n_kv_heads: n_heads,
        head_dim: ModelConfig::head_dim_for(d, n_heads)?,
        d_ff,
        max_positions,
        type_vocab_size: 0,
        position: PositionKind::Learned,
        norm: NormKind::LayerNorm,
        norm_placement: NormPlacement::Pre,
        norm_eps: 1e-5,
        embedding_norm: false,
        final_norm: true,
        ffn: FfnKind::Mlp,
        activation: Activation::Gelu,
        qkv_bias: true,
        attn_out_bias: true,
        ffn_bias: true,
        norm_bias: true,
        qk_norm: false,
        tie_embeddings: true,
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
    cfg.validate().map_err(|e| {
        Error::format(
            path,
            format!("the model's dimensions do not make a Whisper: {e}"),
        )
    })?;
    Ok(cfg)
}

/// A Conv1d of the front-end (kernel 3, padding 1), its weight checked as (out, in, 3).
fn conv(
    file: &Ct2File,
    used: &UsedKeys,
    weight: &str,
    bias: &str,
    stride: usize,
    want: [usize; 2],
) -> Result<Conv1d> {
    let w = file.tensor(weight)?;
    if w.shape() != [want[0], want[1], 3] {
        return Err(Error::Weights(format!(
            "{}: {weight} has shape {:?}, expected [{}, {}, 3]",
            file.path().display(),
            w.shape(),
            want[0],
            want[1]
        )));
    }
    let b = file.tensor(bias)?;
    used.note(weight);
    used.note(bias);
    Conv1d::new(w, Some(b), stride, 1)
}

/// The model of a CTranslate2 Whisper folder: every variable of its `model.bin` placed in
/// the generic encoder-decoder (f16 widened to f32), or an error naming the one that
/// does not fit or is left over.
pub fn load(folder: &Ct2Folder) -> Result<EncoderDecoderModel> {
    let file = &folder.model;
    let used = UsedKeys::default();
    let cfg = config(file, &used)?;
    let enc = Ct2Weights::new(file, &cfg, Stack::Encoder, &used);
    let dec = Ct2Weights::new(file, &cfg, Stack::Decoder, &used);
    let d = cfg.d_model;

    let n_mels = dims_of(file, CONV1_WEIGHT)?.get(1).copied().unwrap_or(0);
    let conv1 = conv(file, &used, CONV1_WEIGHT, CONV1_BIAS, 1, [d, n_mels])?;
    let conv2 = conv(file, &used, CONV2_WEIGHT, CONV2_BIAS, 2, [d, d])?;
    let front_end = ConvStem::new(conv1, conv2, Activation::Gelu)?;
    let src_pos = file.tensor(ENCODER_POSITIONS)?;
    if src_pos.shape().get(1) != Some(&d) {
        return Err(Error::Weights(format!(
            "{}: {ENCODER_POSITIONS} has shape {:?}, expected (positions, {d})",
            file.path().display(),
            src_pos.shape()
        )));
    }
    used.note(ENCODER_POSITIONS);

    let encoder = build::encoder(&cfg, &enc)?;
    let mut decoder = build::cross_decoder(&cfg, &dec)?;
    // A decoded token runs every decoder product on one row: keep the f16 numbers the
    // file stores for those (self-attention, the cross-attention's query and output —
    // its keys and values are computed once per window — and the FFN), read at half the
    // bytes for the same results.
    for layer in &mut decoder.layers {
        let a = &mut layer.self_attn;
        let mut one_row = vec![&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.o_proj];
        if let Some(c) = &mut layer.cross_attn {
            one_row.extend([&mut c.q_proj, &mut c.o_proj]);
        }
        one_row.extend(layer.ffn.linears_mut());
        for l in one_row {
            l.keep_f16();
        }
    }
    let embedding = Embedding::new(dec.tensor(Param::TokenEmbedding, 0)?, cfg.embedding_scale)?;
    let positions = LearnedPositions::new(dec.tensor(Param::PositionEmbedding, 0)?)?;
    if let Some(target) = file.aliases().get("decoder/projection/weight") {
        if target != "decoder/embeddings/weight" {
            return Err(Error::Weights(format!(
                "{}: decoder/projection/weight is an alias of {target}; lucent's Whisper ties the output to decoder/embeddings/weight",
                file.path().display()
            )));
        }
    }
    dec.check_all_used()?;
    let head_f16 = exact_f16(&embedding);
    Ok(EncoderDecoderModel {
        config: cfg,
        embedding,
        src_embedding: None,
        positions: Some(AbsolutePositions::Learned(positions)),
        src_positions: Some(AbsolutePositions::Learned(LearnedPositions::new(src_pos)?)),
        front_end: Some(front_end),
        transformer: Transformer::new(encoder, decoder)?,
        head: None,
        head_f16,
        numerics: Numerics::Lucent,
        head_copy: None,
        products: [Precision::Exact; Products::COUNT],
        precision: Precision::Exact,
        head_rules: Default::default(),
    })
}

/// The table's numbers as f16 when every one is an f16 value (the file stored them so),
/// for the tied head's one-row product; None otherwise.
fn exact_f16(e: &Embedding) -> Option<Arc<Vec<half::f16>>> {
    let t = e.table.as_f32()?.data();
    let h: Vec<half::f16> = t.iter().map(|&x| half::f16::from_f32(x)).collect();
    h.iter()
        .zip(t)
        .all(|(h, x)| h.to_f32().to_bits() == x.to_bits())
        .then(|| Arc::new(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_roles_take_their_rows() {
        assert_eq!(
            key(Stack::Decoder, Param::ValueWeight, 2),
            Some((
                "decoder/layer_2/self_attention/linear_0/weight".into(),
                Some(2)
            ))
        );
        assert_eq!(
            key(Stack::Decoder, Param::CrossValueBias, 0),
            Some(("decoder/layer_0/attention/linear_1/bias".into(), Some(1)))
        );
        assert_eq!(key(Stack::Encoder, Param::TokenEmbedding, 0), None);
        assert_eq!(
            key(Stack::Encoder, Param::FinalNormBias, 0),
            Some(("encoder/layer_norm/beta".into(), None))
        );
    }
}
