//! `EncoderDecoderModel`: the Transformer of the paper (Vaswani et al. 2017, figure 1)
//! as a [`ModelConfig`] describes it — the guides' central picture:
//!
//! memory = Encoder(E_src[src] · scale + P[0..s])
//! logits = Decoder(E[tgt] · scale + P[0..t], memory) · E_outᵀ
//!
//! The encoder reads the whole source with bidirectional self-attention (padding keys
//! hidden); each decoder layer has causal self-attention, then cross-attention whose
//! queries come from the decoder and whose keys and values are the encoder's output,
//! then the feed-forward network. Generation encodes the source once and decodes one
//! token at a time through a [`KvCache`] (self-attention only: the memory does not
//! change).
//!
//! `lucent train seq2seq` builds one ([`EncoderDecoderModel::new_random`]: shared source
//! and target embeddings scaled by √d, sinusoidal positions, post-norm layers, an untied
//! head); a training run loads back through the same type.
//!
//! A speech model (Whisper, `model/family/whisper.rs`) is the same type with two more
//! parts: a convolutional front-end ([`ConvStem`]) that reads audio features instead of
//! source token ids ([`EncoderDecoderModel::encode_features`]), and its own source
//! positions (`src_positions`: Whisper's stored sinusoids over 1500 positions, while
//! the decoder's are a learned table of 448). Decoding with a [`KvCache`] computes the
//! cross-attention's keys and values of the memory once, at the first step.
//!
//! Its weight products can run in another [`Precision`]
//! ([`EncoderDecoderModel::set_precision`]): copies in int8 or bf16 made once, chosen
//! per group of products ([`Products`]) — for Whisper from measurement
//! (docs/precision.md).

use std::sync::Arc;

use rand::Rng;

use crate::autograd::no_grad;
use crate::model::build;
use crate::model::config::{ModelKind, PositionKind};
use crate::model::ModelConfig;
use crate::nn::mask::key_padding_bias;
use crate::nn::position::{AbsolutePositions, LearnedPositions, SinusoidalEncoding};
use crate::nn::trace::{record, scoped};
use crate::nn::{AttentionOptions, ConvStem, Embedding, Head, KvCache, Linear, Trace, Transformer};
use crate::ops::linear_bf16::Bf16Matrix;
use crate::ops::screened_head::{HeadRules, ScreenedHead};
use crate::pipeline::generate::{Sampler, Sampling};
use crate::runtime::{Numerics, Precision};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Target tokens up to which a decoder pass runs on a thread team (a decode step, a
/// short prompt): its products are small and many.
const TEAM_MAX_ROWS: usize = 16;

/// An encoder-decoder Transformer: embeddings and positions, the two stacks, a head.
#[derive(Clone, Debug)]
pub struct EncoderDecoderModel {
    /// The checked configuration it was built from.
    pub config: ModelConfig,
    /// E: (V, d), the target (decoder) token table, with the config's embedding scale;
    /// the source's too unless `src_embedding` is set.
    pub embedding: Embedding,
    /// A separate source token table, if the model has one.
    pub src_embedding: Option<Embedding>,
    /// Absolute positions added to the decoder's input, and to the encoder's unless
    /// `src_positions` is set.
    pub positions: Option<AbsolutePositions>,
    /// The encoder's own positions, if they differ from the decoder's (Whisper).
    pub src_positions: Option<AbsolutePositions>,
    /// A convolutional front-end over audio features, for a speech model (Whisper):
    /// the source is then features ([`EncoderDecoderModel::encode_features`]), not ids.
    pub front_end: Option<ConvStem>,
    /// The encoder and decoder stacks.
    pub transformer: Transformer,
    /// W_vocab: (V, d); None when the head is tied to the target token table.
    pub head: Option<Head>,
    /// The tied table's numbers in f16, when every one of them is an f16 value (Whisper
    /// stores its weights in f16): a decoded token's logits read these, half the bytes,
    /// for the same numbers ([`crate::ops::matmul::gemv_t_f16`]).
    pub head_f16: Option<Arc<Vec<half::f16>>>,
    /// How its arithmetic rounds ([`Numerics`]; lucent's own for every family so far).
    pub numerics: Numerics,
    /// The tied head's table in int8 or bf16, when the head's products run in that
    /// precision ([`EncoderDecoderModel::set_products`]); the embedding lookup keeps
    /// reading the f32 table.
    pub head_copy: Option<HeadCopy>,
    /// The precision of each group of products, in [`Products::ALL`]'s order (all
    /// exact unless [`EncoderDecoderModel::set_precision`] chose otherwise).
    pub products: [Precision; Products::COUNT],
    /// The precision it was opened in ([`EncoderDecoderModel::set_precision`]).
    pub precision: Precision,
    /// What the decoding rules do to the head's rows, for an int8 head
    /// ([`ScreenedHead`]): the rows computed exactly at every step besides those that
    /// can be the largest, and the rows always masked (Whisper's special and timestamp
    /// tokens, and its `suppress_ids`; the transcriber sets them). By default no row is
    /// exact at every step and none is masked.
    pub head_rules: HeadRules,
}

/// A copy of the tied head's table (V, d) in a lower precision, made once.
#[derive(Clone, Debug)]
pub enum HeadCopy {
    /// 8-bit weights, one scale per vocabulary row, with each row's error bound: the
    /// rows that can be the largest are computed exactly ([`ScreenedHead`]).
    Int8(Arc<ScreenedHead>),
    /// bf16 weights ([`Bf16Matrix`]).
    Bf16(Arc<Bf16Matrix>),
}

/// The groups of an encoder-decoder's weight products whose precision is chosen
/// together ([`EncoderDecoderModel::set_products`]). The convolutional front-end, the
/// norms, attention's scores and P·V, softmax and the residual adds are not among them:
/// they stay f32 in every precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Products {
    /// The encoder's Q and K projections.
    EncoderQk,
    /// The encoder's V projection.
    EncoderV,
    /// The encoder's attention output projection.
    EncoderOut,
    /// The encoder's feed-forward up projection (d → d_ff).
    EncoderUp,
    /// The encoder's feed-forward down projection (d_ff → d).
    EncoderDown,
    /// The decoder's self-attention: Q, K, V and the output projection (one row per
    /// decoded token).
    DecoderSelfAttention,
    /// The decoder's cross-attention: Q and the output projection per token, K and V of
    /// the memory once per window.
    DecoderCrossAttention,
    /// The decoder's feed-forward up projection.
    DecoderUp,
    /// The decoder's feed-forward down projection.
    DecoderDown,
    /// The vocabulary head (V × d: for Whisper the tied token table, 51,864 rows).
    Head,
}

impl Products {
    /// How many groups there are.
    pub const COUNT: usize = 10;

    /// Every group, in the order of [`EncoderDecoderModel::products`].
    pub const ALL: [Products; Products::COUNT] = [
        Products::EncoderQk,
        Products::EncoderV,
        Products::EncoderOut,
        Products::EncoderUp,
        Products::EncoderDown,
        Products::DecoderSelfAttention,
        Products::DecoderCrossAttention,
        Products::DecoderUp,
        Products::DecoderDown,
        Products::Head,
    ];

    /// A short name (`encoder.qk`, `decoder.cross_attn`, `head`), for reports.
    pub fn name(self) -> &'static str {
        match self {
            Products::EncoderQk => "encoder.qk",
            Products::EncoderV => "encoder.v",
            Products::EncoderOut => "encoder.out",
            Products::EncoderUp => "encoder.ffn_up",
            Products::EncoderDown => "encoder.ffn_down",
            Products::DecoderSelfAttention => "decoder.self_attn",
            Products::DecoderCrossAttention => "decoder.cross_attn",
            Products::DecoderUp => "decoder.ffn_up",
            Products::DecoderDown => "decoder.ffn_down",
            Products::Head => "head",
        }
    }

    /// Its place in [`Products::ALL`].
    fn index(self) -> usize {
        Products::ALL.iter().position(|&g| g == self).unwrap_or(0)
    }

    /// The precision this group runs in when the model is opened in `precision`: every
    /// group in bf16 for [`Precision::Bf16`]; for [`Precision::Int8`] int8 except where
    /// Whisper's measurement found int8 costs accuracy (docs/precision.md).
    pub fn plan(self, precision: Precision) -> Precision {
        match precision {
            Precision::Int8 if INT8_IN_BF16.contains(&self) => Precision::Bf16,
            p => p,
        }
    }
}

/// The groups an int8 model keeps in bf16 (docs/precision.md has the measurement): all
/// but the feed-forward up projections of both stacks and the encoder's down projection,
/// the only groups that, alone in int8, changed no clip's ids, and the head, whose int8
/// copy computes every row that can be the largest exactly ([`ScreenedHead`]: greedy
/// decoding keeps the exact head's choice).
///
/// Measured on the suite's 13 clips with whisper-tiny.en (greedy ids equal exact's;
/// `examples/whisper_precision_probe.rs`): every group in plain int8 changes 2 clips
/// (CTranslate2's own int8 changes 1 of them); the encoder's Q/K or the plain int8 head
/// alone 2, the encoder's V or attention output, the decoder's self- or cross-attention
/// or FFN down projection alone 1.
const INT8_IN_BF16: &[Products] = &[
    Products::EncoderQk,
    Products::EncoderV,
    Products::EncoderOut,
    Products::DecoderSelfAttention,
    Products::DecoderCrossAttention,
    Products::DecoderDown,
];

/// Give `l` the copy `precision` asks for, from its f32 weights: none (exact, with the
/// f16 copy for one-row products back when `one_row` and W is f16 numbers), int8 or
/// bf16. A packed copy is kept if there was one.
fn keep_precision(l: &mut Linear, precision: Precision, one_row: bool) {
    let packed = l.has_packed();
    l.forget_copies();
    if packed {
        l.keep_packed();
    }
    match precision {
        Precision::Exact => {
            if one_row {
                l.keep_f16();
            }
        }
        Precision::Int8 => {
            l.keep_int8();
        }
        Precision::Bf16 => {
            l.keep_bf16();
        }
    }
}

/// Refuse, by name, the config fields an encoder-decoder cannot honour.
fn check_config(cfg: &ModelConfig) -> Result<()> {
    cfg.validate()?;
    let refuse = |field: &str, why: &str| {
        Err(Error::Config(format!(
            "{field}: {why} (EncoderDecoderModel, family {})",
            cfg.family
        )))
    };
    if cfg.kind != ModelKind::EncoderDecoder {
        return refuse(
            "kind",
            &format!(
                "is {:?}, an EncoderDecoderModel needs encoder_decoder",
                cfg.kind
            ),
        );
    }
    if cfg.type_vocab_size > 0 {
        return refuse(
            "type_vocab_size",
            "token types (segments) belong to BERT encoders",
        );
    }
    if cfg.embedding_norm {
        return refuse(
            "embedding_norm",
            "no encoder-decoder family has a norm after the embeddings",
        );
    }
    if cfg.pooler {
        return refuse("pooler", "a pooler belongs to BERT encoders");
    }
    if matches!(
        cfg.position,
        PositionKind::Rope { .. } | PositionKind::Alibi
    ) {
        return refuse(
            "position",
            "RoPE and ALiBi are not wired into the encoder-decoder's two stacks; use sinusoidal or learned positions",
        );
    }
    if cfg.sliding_window.is_some() {
        return refuse(
            "sliding_window",
            "no encoder-decoder family has windowed attention",
        );
    }
    Ok(())
}

impl EncoderDecoderModel {
    /// A freshly initialised model for training: the token table drawn from
    /// N(0, 1/d) when the embeddings are scaled by √d (so that after the scale they are
    /// unit-sized, as in the paper's setup), else N(0, 0.02²); GPT-2's scheme for the
    /// rest; an untied head N(0, 0.02²).
    pub fn new_random(cfg: ModelConfig, rng: &mut impl Rng) -> Result<Self> {
        check_config(&cfg)?;
        let std = if cfg.embedding_scale != 1.0 {
            1.0 / (cfg.d_model as f32).sqrt()
        } else {
            0.02
        };
        let embedding =
            Embedding::new_random(cfg.vocab_size, cfg.d_model, std, cfg.embedding_scale, rng);
        let positions = match cfg.position {
            PositionKind::Sinusoidal => Some(AbsolutePositions::Sinusoidal(
                SinusoidalEncoding::new(cfg.max_positions, cfg.d_model)?,
            )),
            PositionKind::Learned => Some(AbsolutePositions::Learned(LearnedPositions::randn(
                cfg.max_positions,
                cfg.d_model,
                0.02,
                rng,
            )?)),
            _ => None,
        };
        let transformer = build::random_transformer(&cfg, rng)?;
        let head =
            (!cfg.tie_embeddings).then(|| Head::new_random(cfg.d_model, cfg.vocab_size, rng));
        Ok(EncoderDecoderModel {
            config: cfg,
            embedding,
            src_embedding: None,
            positions,
            src_positions: None,
            front_end: None,
            transformer,
            head,
            head_f16: None,
            numerics: Numerics::Lucent,
            head_copy: None,
            products: [Precision::Exact; Products::COUNT],
            precision: Precision::Exact,
            head_rules: HeadRules::default(),
        })
    }

    /// Embeddings and positions from `offset` of a batch of equally long id sequences.
    ///
    /// # Shapes
    /// ids: b sequences of t → (b, t, d)
    fn embed(
        &self,
        table: &Embedding,
        positions: Option<&AbsolutePositions>,
        ids: &[Vec<usize>],
        offset: usize,
    ) -> Result<Tensor> {
        let x = table.forward(ids)?; // (b, t, d)
        match positions {
            Some(p) => p.forward(&x, offset), // (b, t, d)
            None => Ok(x),
        }
    }

    /// Vocabulary logits of decoder states: the head, or the target table when tied.
    ///
    /// # Shapes
    /// h: (..., d) → (..., V)
    pub fn logits(&self, h: &Tensor) -> Result<Tensor> {
        if let (None, Some(copy)) = (&self.head, &self.head_copy) {
            let d = h.last_dim();
            let (v, k) = match copy {
                HeadCopy::Int8(m) => (m.n(), m.k()),
                HeadCopy::Bf16(m) => (m.n(), m.k()),
            };
            if h.rank() == 0 || d != k {
                return Err(Error::mismatch(
                    "vocabulary head (h vs table copy (V, d))",
                    h.shape(),
                    &[v, k],
                ));
            }
            let rows = h.numel() / d.max(1);
            let mut y = vec![0.0f32; rows * v];
            match copy {
                HeadCopy::Int8(m) => {
                    m.logits(&mut y, h.data(), rows, &self.head_rules, |x, js, y| {
                        self.exact_head_rows(x, js, y)
                    });
                }
                HeadCopy::Bf16(m) => m.matmul(&mut y, h.data(), None, rows),
            }
            let mut shape = h.shape().to_vec();
            if let Some(last) = shape.last_mut() {
                *last = v;
            }
            return Tensor::new(y, &shape); // (..., V)
        }
        if let (None, Some(t16)) = (&self.head, &self.head_f16) {
            let d = h.last_dim();
            // One row on a level whose f32 path is the matrix-vector kernel: the same
            // sums over the f16 copy.
            if d > 0 && h.numel() == d && t16.len() % d == 0 && crate::ops::simd::has_avx2_fma() {
                let v = t16.len() / d;
                let mut y = vec![0.0f32; v];
                crate::ops::matmul::gemv_t_f16(&mut y, h.data(), t16, d, v);
                let mut shape = h.shape().to_vec();
                if let Some(last) = shape.last_mut() {
                    *last = v;
                }
                return Tensor::new(y, &shape); // (..., V)
            }
        }
        match &self.head {
            Some(head) => head.logits_with(h, self.numerics),
            None => self.embedding.table.matmul_t(h, self.numerics),
        }
    }

    /// The exact head's numbers for the rows `js` (ascending) of one decoder state `x`,
    /// into `y` (V): the f16 copy's one-row kernel when there is one (the numbers a
    /// decoded token's exact logits hold, bit for bit), else the f32 table's.
    ///
    /// # Shapes
    /// x: (d), y: (V)
    fn exact_head_rows(&self, x: &[f32], js: &[usize], y: &mut [f32]) {
        let (k, v) = (x.len(), y.len());
        match (&self.head_f16, self.embedding.table.as_f32()) {
            (Some(t16), _) if crate::ops::simd::has_avx2_fma() && t16.len() == v * k => {
                crate::ops::matmul::gemv_t_f16_rows(y, x, t16, k, v, js);
            }
            (_, Some(t)) if t.numel() == v * k => {
                crate::ops::matmul::gemv_t_rows(y, x, t.data(), k, v, js);
            }
            // The table is quantised (no encoder-decoder family has one): its int8 rows stay.
            _ => {}
        }
    }

    /// Compute the weight products in `precision`, each group as [`Products::plan`]
    /// chooses: int8 or bf16 copies of the weights made once here (the f32 weights stay,
    /// and the embedding lookup reads them), or, for [`Precision::Exact`], those copies
    /// dropped (the same numbers as a model never changed). The front-end, norms,
    /// attention's scores and P·V, softmax and residual adds stay f32.
    pub fn set_precision(&mut self, precision: Precision) {
        for group in Products::ALL {
            self.set_products(group, group.plan(precision));
        }
        self.precision = precision;
    }

    /// Compute one group of products in `precision` (the others as they are): what
    /// [`EncoderDecoderModel::set_precision`] does per group, and what a probe of which
    /// group int8 harms calls directly. Weights that are already quantised (a GGUF
    /// file's) are left as they are.
    pub fn set_products(&mut self, group: Products, precision: Precision) {
        self.products[group.index()] = precision;
        if group == Products::Head {
            self.head_copy = None;
            if let Some(head) = &mut self.head {
                keep_precision(&mut head.proj, precision, false);
                return;
            }
            let Some(table) = self.embedding.table.as_f32() else {
                return;
            };
            let Ok([v, d]) = table.dims() else {
                return;
            };
            self.head_copy = match precision {
                Precision::Exact => None,
                Precision::Int8 => Some(HeadCopy::Int8(Arc::new(ScreenedHead::new(
                    table.data(),
                    v,
                    d,
                )))),
                Precision::Bf16 => Some(HeadCopy::Bf16(Arc::new(Bf16Matrix::round(
                    table.data(),
                    v,
                    d,
                )))),
            };
            return;
        }
        for layer in &mut self.transformer.encoder.layers {
            let a = &mut layer.self_attn;
            let mut ffn = layer.ffn.linears_mut();
            let down = ffn.pop();
            let linears: Vec<&mut Linear> = match group {
                Products::EncoderQk => vec![&mut a.q_proj, &mut a.k_proj],
                Products::EncoderV => vec![&mut a.v_proj],
                Products::EncoderOut => vec![&mut a.o_proj],
                Products::EncoderUp => ffn,
                Products::EncoderDown => down.into_iter().collect(),
                _ => Vec::new(),
            };
            for l in linears {
                keep_precision(l, precision, false);
            }
        }
        for layer in &mut self.transformer.decoder.layers {
            let a = &mut layer.self_attn;
            let mut ffn = layer.ffn.linears_mut();
            let down = ffn.pop();
            // (linear, whether it runs on one row per decoded token)
            let linears: Vec<(&mut Linear, bool)> = match group {
                Products::DecoderSelfAttention => vec![
                    (&mut a.q_proj, true),
                    (&mut a.k_proj, true),
                    (&mut a.v_proj, true),
                    (&mut a.o_proj, true),
                ],
                Products::DecoderCrossAttention => match &mut layer.cross_attn {
                    Some(c) => vec![
                        (&mut c.q_proj, true),
                        (&mut c.k_proj, false),
                        (&mut c.v_proj, false),
                        (&mut c.o_proj, true),
                    ],
                    None => Vec::new(),
                },
                Products::DecoderUp => ffn.into_iter().map(|l| (l, true)).collect(),
                Products::DecoderDown => down.into_iter().map(|l| (l, true)).collect(),
                _ => Vec::new(),
            };
            for (l, one_row) in linears {
                keep_precision(l, precision, one_row);
            }
        }
    }

    /// The encoder's output (the "memory") for a padded batch of sources; sequence b
    /// has `src_lens[b]` real tokens (None: all of them), its padding hidden from
    /// attention. The trace gets `encoder.*`.
    ///
    /// # Shapes
    /// src: b sequences of s ids → (b, s, d)
    pub fn encode(
        &self,
        src: &[Vec<usize>],
        src_lens: Option<&[usize]>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let s = src.first().map_or(0, Vec::len);
        let bias = match src_lens {
            Some(l) => key_padding_bias(l, s, s)?,
            None => None,
        };
        let opts = AttentionOptions {
            bias: bias.as_ref(),
            numerics: self.numerics,
            ..AttentionOptions::none()
        };
        if self.front_end.is_some() {
            return Err(Error::Argument(
                "this model reads audio features, not source ids: use encode_features".into(),
            ));
        }
        let table = self.src_embedding.as_ref().unwrap_or(&self.embedding);
        let positions = self.src_positions.as_ref().or(self.positions.as_ref());
        let x = self.embed(table, positions, src, 0)?; // (b, s, d)
        self.transformer.encoder.forward(&x, &opts, trace)
    }

    /// The encoder's output for audio features, through the convolutional front-end:
    /// conv → GELU → conv (stride 2) → GELU, plus the source positions, then the encoder
    /// stack. The trace gets `front_end.output` and `encoder.*`.
    ///
    /// # Shapes
    /// features: (b, n_mels, frames) → (b, frames / 2, d)
    pub fn encode_features(&self, features: &Tensor, trace: Option<&mut Trace>) -> Result<Tensor> {
        let stem = self.front_end.as_ref().ok_or_else(|| {
            Error::Argument(format!(
                "this {} model has no audio front-end; encode source ids with encode",
                self.config.family
            ))
        })?;
        let mut trace = trace;
        let x = stem.forward(features)?; // (b, s, d)
        scoped(trace.as_deref_mut(), "front_end", |mut tr| {
            record(&mut tr, "output", &x);
            Ok(())
        })?;
        let x = match self.src_positions.as_ref().or(self.positions.as_ref()) {
            Some(p) => p.forward(&x, 0)?, // (b, s, d)
            None => x,
        };
        let opts = AttentionOptions {
            numerics: self.numerics,
            ..AttentionOptions::none()
        };
        self.transformer.encoder.forward(&x, &opts, trace)
    }

    /// Decoder logits for target tokens placed at positions `offset ..` (after what
    /// `cache` holds), reading `memory` whose sequence b has `src_lens[b]` real
    /// positions. The trace gets `decoder.*` (with `cross_attn.*` per layer).
    ///
    /// # Shapes
    /// tgt: b × t ids, memory: (b, s, d) → (b, t, V)
    pub fn decode(
        &self,
        tgt: &[Vec<usize>],
        memory: &Tensor,
        src_lens: Option<&[usize]>,
        cache: Option<&mut KvCache>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let t = tgt.first().map_or(0, Vec::len);
        if t <= TEAM_MAX_ROWS
            && crate::threads::threads() > 1
            && trace.is_none()
            && !crate::threads::in_team()
        {
            // A decode step is ~30 small products (Whisper: f16 rows of 384 or 512,
            // the cross-attention of a few heads): on a team that stays awake for the
            // step instead of waking the pool for each one.
            return crate::threads::with_team(|| {
                self.decode_here(tgt, memory, src_lens, cache, None)
            });
        }
        self.decode_here(tgt, memory, src_lens, cache, trace)
    }

    /// [`EncoderDecoderModel::decode`] on the calling thread's runtime as it is.
    fn decode_here(
        &self,
        tgt: &[Vec<usize>],
        memory: &Tensor,
        src_lens: Option<&[usize]>,
        cache: Option<&mut KvCache>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let offset = cache.as_ref().map_or(0, |c| c.len());
        let t = tgt.first().map_or(0, Vec::len);
        let [_, s, _] = memory.dims()?;
        let memory_bias = match src_lens {
            Some(l) => key_padding_bias(l, t, s)?,
            None => None,
        };
        let x = self.embed(&self.embedding, self.positions.as_ref(), tgt, offset)?; // (b, t, d)
        let h = self.transformer.decoder.forward(
            &x,
            Some(memory),
            &AttentionOptions {
                numerics: self.numerics,
                ..AttentionOptions::causal()
            },
            memory_bias.as_ref(),
            cache,
            trace,
        )?; // (b, t, d)
        self.logits(&h) // (b, t, V)
    }

    /// Teacher-forced logits: the decoder reads `tgt_in` (the target shifted right, BOS
    /// first) and cross-attends to the encoded `src`.
    ///
    /// # Shapes
    /// src: b × s ids, tgt_in: b × t ids → (b, t, V)
    pub fn forward(
        &self,
        src: &[Vec<usize>],
        tgt_in: &[Vec<usize>],
        src_lens: Option<&[usize]>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let mut trace = trace;
        let memory = self.encode(src, src_lens, trace.as_deref_mut())?;
        self.decode(tgt_in, &memory, src_lens, None, trace)
    }

    /// A KV cache for the decoder's self-attention: `b` sequences of up to `max_t`.
    pub fn new_cache(&self, b: usize, max_t: usize) -> KvCache {
        self.transformer.decoder.new_cache(b, max_t)
    }

    /// Greedy decoding with the decoder's KV cache: start from `bos`, stop at `eos` or
    /// after `max_len` tokens. Returns each sequence's tokens (without BOS/EOS).
    /// [`EncoderDecoderModel::decode_with`] with a greedy sampler per sequence.
    pub fn greedy(
        &self,
        src: &[Vec<usize>],
        src_lens: Option<&[usize]>,
        bos: usize,
        eos: usize,
        max_len: usize,
    ) -> Result<Vec<Vec<usize>>> {
        let mut samplers = src
            .iter()
            .map(|_| Sampler::new(&Sampling::greedy()))
            .collect::<Result<Vec<_>>>()?;
        self.decode_with(src, src_lens, bos, eos, max_len, &mut samplers)
    }

    /// Decoding with the decoder's KV cache, each sequence's next token chosen by its
    /// own [`Sampler`] (the one decoding step of every loop: logit bias, a constraint's
    /// mask, rules, penalties, then greedy or a draw; the history it sees is the
    /// sequence's generated tokens): start from `bos`, stop at `eos` or after `max_len`
    /// tokens. Returns each sequence's tokens (without BOS/EOS). A sequence that has
    /// ended is fed its row's argmax until the others end (its sampler is not asked).
    ///
    /// # Shapes
    /// src: b × s ids, samplers: b → b × (≤ max_len) ids
    pub fn decode_with(
        &self,
        src: &[Vec<usize>],
        src_lens: Option<&[usize]>,
        bos: usize,
        eos: usize,
        max_len: usize,
        samplers: &mut [Sampler],
    ) -> Result<Vec<Vec<usize>>> {
        let b = src.len();
        if samplers.len() != b {
            return Err(Error::Argument(format!(
                "{} samplers for {b} source sequences; give one per sequence",
                samplers.len()
            )));
        }
        no_grad(|| {
            let memory = self.encode(src, src_lens, None)?;
            let mut cache = self.new_cache(b, max_len + 1);
            let mut current: Vec<Vec<usize>> = vec![vec![bos]; b];
            let mut out: Vec<Vec<usize>> = vec![Vec::new(); b];
            let mut history: Vec<Vec<u32>> = vec![Vec::new(); b];
            let mut done = vec![false; b];
            for _ in 0..max_len {
                let logits = self.decode(&current, &memory, src_lens, Some(&mut cache), None)?; // (b, 1, V)
                let v = logits.last_dim().max(1);
                for (i, row) in logits.data().chunks(v).enumerate().take(b) {
                    let next = if done[i] {
                        crate::ops::softmax::argmax(row)
                    } else {
                        let mut z = row.to_vec(); // (V)
                        let next = samplers[i].sample(&mut z, &history[i])? as usize;
                        if next == eos {
                            done[i] = true;
                        } else {
                            out[i].push(next);
                            history[i].push(next as u32);
                        }
                        next
                    };
                    current[i] = vec![next];
                }
                if done.iter().all(|&d| d) {
                    break;
                }
            }
            Ok(out)
        })
    }
}
