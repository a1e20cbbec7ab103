//! `DecoderModel`: the generic decoder-only Transformer (GPT-style: GPT-2, the GPT that
//! `lucent train lm` builds, LLaMA / SmolLM2, Gemma 3) as a [`ModelConfig`] describes it:
//!
//! x = E[ids] · scale (+ P[positions])  →  x ← layerₙ(… layer₁(x))  →  final norm  →
//! logits = x · E_outᵀ
//!
//! with every layer's self-attention causal, absolute positions added to the embeddings
//! when the config has them (learned or sinusoidal; RoPE and ALiBi act inside
//! attention), and E_out the token table itself when the head is tied. Generation feeds
//! the prompt once (prefill) and then one token at a time through a [`KvCache`], so
//! each step computes only the new position.
//!
//! Built from a config and a [`WeightSource`] ([`DecoderModel::load`]: a GGUF file, a
//! safetensors checkpoint, a training run) or with fresh weights for training
//! ([`DecoderModel::new_random`]); every config field is honoured or refused by name.

use std::path::Path;

use rand::Rng;

use crate::io::gguf::GgufFile;
use crate::model::build;
use crate::model::config::{ModelKind, NormPlacement, PositionKind};
use crate::model::family::{self, Param, WeightSource};
use crate::model::ModelConfig;
use crate::nn::position::{AbsolutePositions, LearnedPositions, SinusoidalEncoding};
use crate::nn::{
    AttentionOptions, Decoder, Dropout, Embedding, Head, KvCache, KvStorage, Linear, Trace,
};
use crate::runtime::{Numerics, Precision};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// A decoder-only Transformer: token embedding (and absolute positions, if any), a
/// causal [`Decoder`] stack (with its final norm), and an output head.
#[derive(Clone, Debug)]
pub struct DecoderModel {
    /// The checked configuration it was built from.
    pub config: ModelConfig,
    /// E: (V, d), with the config's embedding scale.
    pub embedding: Embedding,
    /// Absolute positions added to the embeddings (GPT-2's learned table, the paper's
    /// sinusoids); None for RoPE, ALiBi or no positions.
    pub positions: Option<AbsolutePositions>,
    /// The layers and the final norm.
    pub decoder: Decoder,
    /// W_vocab: (V, d); None when the head is tied to the token table E.
    pub head: Option<Head>,
    /// How its arithmetic rounds, passed to every layer and op of a forward pass. A GGUF
    /// model runs llama.cpp's ([`Numerics::LlamaCpp`]: its logits equal llama.cpp's);
    /// [`Numerics::RowInvariant`] computes every row as a lone row, so a KV-cached decode
    /// equals the full forward bit for bit ([`DecoderModel::with_numerics`]); a model
    /// lucent trained runs lucent's own ([`Numerics::Lucent`]).
    pub numerics: Numerics,
}

/// The groups of a decoder's weight products that [`DecoderModel::set_products`] can
/// give a precision each (what a probe of which group int8 harms varies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecoderProducts {
    /// Self-attention's Q, K and V projections.
    Qkv,
    /// Self-attention's output projection.
    AttentionOut,
    /// The feed-forward's up projections (gate and up; W₁ of a plain MLP; every
    /// expert's, the router staying exact).
    Up,
    /// The feed-forward's down projection (W₂; every expert's).
    Down,
    /// The vocabulary head (the token table read as the head when tied; the embedding
    /// lookup keeps reading the table as stored).
    Head,
}

impl DecoderProducts {
    /// Every group, in the order of a layer's pass.
    pub const ALL: [DecoderProducts; 5] = [
        DecoderProducts::Qkv,
        DecoderProducts::AttentionOut,
        DecoderProducts::Up,
        DecoderProducts::Down,
        DecoderProducts::Head,
    ];

    /// The group's name (`qkv`, `attn_out`, `up`, `down`, `head`).
    pub fn name(self) -> &'static str {
        match self {
            DecoderProducts::Qkv => "qkv",
            DecoderProducts::AttentionOut => "attn_out",
            DecoderProducts::Up => "up",
            DecoderProducts::Down => "down",
            DecoderProducts::Head => "head",
        }
    }

    /// The precision this group runs in when the model is opened in `precision`: the
    /// same precision for every group (docs/precision.md measures the distance).
    pub fn plan(self, precision: Precision) -> Precision {
        precision
    }
}

/// G, the activation group of a decoder's int8 products (`Linear::keep_int8_groups`):
/// chosen by `examples/decoder_precision_probe.rs`, the largest G within 1 % of exact's
/// perplexity on both SmolLM2 (+0.63 %) and Gemma 3 (+0.81 %, 8,000 characters; G 64
/// was +1.34 %) where one scale per row was +4.2 % / +5.7 %, with a batched step still
/// faster than exact (docs/precision.md).
pub const INT8_GROUP: usize = 32;

/// Give `l` the copy `precision` asks for (none for exact): its products then read it.
fn keep_precision(l: &mut Linear, precision: Precision) {
    l.forget_copies();
    match precision {
        Precision::Exact => {}
        Precision::Int8 => {
            // per-row weights, activations in groups of INT8_GROUP (docs/precision.md)
            if !matches!(l.keep_int8_groups(INT8_GROUP), Ok(true)) {
                l.keep_int8();
            }
        }
        Precision::Bf16 => {
            l.keep_bf16();
        }
    }
}

/// Refuse, by name, the config fields a decoder-only model cannot honour.
fn check_decoder_config(cfg: &ModelConfig) -> Result<()> {
    cfg.validate()?;
    let refuse = |field: &str, why: &str| {
        Err(Error::Config(format!(
            "{field}: {why} (DecoderModel, family {})",
            cfg.family
        )))
    };
    if cfg.kind != ModelKind::Decoder {
        return refuse(
            "kind",
            &format!("is {:?}, a DecoderModel needs decoder", cfg.kind),
        );
    }
    if cfg.type_vocab_size > 0 {
        return refuse(
            "type_vocab_size",
            "token types (segments) belong to encoders",
        );
    }
    if cfg.embedding_norm {
        return refuse(
            "embedding_norm",
            "no decoder family has a norm after the embeddings",
        );
    }
    if cfg.pooler {
        return refuse("pooler", "a pooler belongs to BERT encoders");
    }
    if cfg.position == PositionKind::Alibi {
        return refuse(
            "position",
            "ALiBi is not wired into the decoder's attention yet",
        );
    }
    Ok(())
}

impl DecoderModel {
    /// Open a GGUF file and build the model it holds.
    pub fn load_gguf(path: &Path) -> Result<DecoderModel> {
        DecoderModel::from_gguf(&DecoderModel::open_to_run(path)?)
    }

    /// Open a GGUF file to run the model it holds: checked first by what may refuse it
    /// (its family, its config), then its bytes held as [`GgufFile::into_held`] holds
    /// them, so that a refusal does not wait for the copy.
    pub fn open_to_run(path: &Path) -> Result<GgufFile> {
        let f = GgufFile::open(path)?;
        DecoderModel::config_of(&f)?;
        f.into_held()
    }

    /// The config of a GGUF file, translated by the family its architecture names.
    pub fn config_of(f: &GgufFile) -> Result<ModelConfig> {
        family::gguf_family(f)?.config(f)
    }

    /// Build the model from an open GGUF file (weights stay memory-mapped); every
    /// tensor of the file must be used.
    pub fn from_gguf(f: &GgufFile) -> Result<DecoderModel> {
        let fam = family::gguf_family(f)?;
        let cfg = fam.config(f)?;
        let w = fam.weights(f, &cfg);
        // The GGUF families run the arithmetic of the engine their files come from.
        let model = DecoderModel::load(cfg.clone(), &w)?.with_numerics(Numerics::LlamaCpp);
        w.check_all_used()?;
        Ok(model)
    }

    /// Build the model for `cfg` from `w`; errors name the missing or mis-shaped tensor,
    /// or the config field the decoder cannot honour.
    pub fn load(cfg: ModelConfig, w: &dyn WeightSource) -> Result<DecoderModel> {
        check_decoder_config(&cfg)?;
        let positions = match cfg.position {
            PositionKind::Learned => Some(AbsolutePositions::Learned(LearnedPositions::new(
                w.tensor(Param::PositionEmbedding, 0)?,
            )?)),
            PositionKind::Sinusoidal => Some(AbsolutePositions::Sinusoidal(
                SinusoidalEncoding::new(cfg.max_positions, cfg.d_model)?,
            )),
            _ => None,
        };
        let layers = (0..cfg.decoder_layers)
            .map(|i| build::decoder_layer(&cfg, w, i))
            .collect::<Result<Vec<_>>>()?;
        let final_norm = build::final_norm(&cfg, w)?;
        let table = w.matrix(Param::TokenEmbedding, 0)?;
        let head = if cfg.tie_embeddings || !w.has(Param::OutputWeight, 0) {
            None
        } else {
            Some(Head::new(Linear::new(
                w.matrix(Param::OutputWeight, 0)?,
                None,
            )?))
        };
        Ok(DecoderModel {
            embedding: Embedding::new(table, cfg.embedding_scale)?,
            positions,
            decoder: Decoder::new(layers, final_norm)?,
            head,
            config: cfg,
            numerics: Numerics::Lucent,
        })
    }

    /// Compute the weight products in `precision`, each group as
    /// [`DecoderProducts::plan`] chooses: int8 or bf16 copies of the weights made once
    /// here (a GGUF file's blocks of any type dequantised, then quantised per output
    /// channel, activations in groups of [`INT8_GROUP`]: `Linear::keep_int8_groups`; or
    /// rounded to bf16; `Linear::keep_int8_blocks`, the blocks' own integers, is not yet
    /// faster than exact, docs/precision.md), or, for
    /// [`Precision::Exact`], those copies dropped (llama.cpp's arithmetic again, bit for
    /// bit). Every product of a pass — a prompt's rows, a lone decoded token, a batched
    /// step of many sequences — then takes the copy, whose rows never depend on each
    /// other (each row's own activation scales, integer sums), so batch invariance holds. The embedding lookup, the
    /// norms, RoPE, attention's scores and P·V, softmax and residual adds are unchanged.
    pub fn set_precision(&mut self, precision: Precision) {
        // The head first: widening it holds the largest f32 copy (V × d) for a moment,
        // best before the layers' copies have grown.
        for group in DecoderProducts::ALL.into_iter().rev() {
            self.set_products(group, group.plan(precision));
        }
    }

    /// Compute one group of products in `precision` (the others as they are): what
    /// [`DecoderModel::set_precision`] does per group, and what a probe of which group
    /// int8 harms calls directly. A tied head gets its own [`Head`] over the same table
    /// (sharing its stored blocks), which holds the copy.
    pub fn set_products(&mut self, group: DecoderProducts, precision: Precision) {
        self.map_products(group, precision != Precision::Exact, &mut |l| {
            keep_precision(l, precision)
        });
    }

    /// Call `f` on every layer of one group of products (what
    /// [`DecoderModel::set_products`] changes; a probe may change them otherwise, as
    /// `examples/decoder_precision_probe.rs` does). With `untie`, a tied head first gets
    /// its own [`Head`] over the same table, so `f` changes the head and not the
    /// embedding lookup.
    pub fn map_products(
        &mut self,
        group: DecoderProducts,
        untie: bool,
        f: &mut dyn FnMut(&mut Linear),
    ) {
        if group == DecoderProducts::Head {
            if self.head.is_none() && untie {
                // (V, d): the table's blocks shared, not copied
                self.head = Head::tied_to(&self.embedding.table).ok();
            }
            if let Some(head) = &mut self.head {
                f(&mut head.proj);
            }
            return;
        }
        for layer in &mut self.decoder.layers {
            let a = &mut layer.self_attn;
            // Each plain feed-forward block's projections, its down projection last.
            let blocks: Vec<Vec<&mut Linear>> = match &mut layer.ffn {
                // The router stays exact: it chooses experts, and a flipped choice
                // costs more than its small product saves.
                crate::nn::FeedForward::Experts(m) => {
                    m.experts.iter_mut().map(|e| e.linears_mut()).collect()
                }
                f => vec![f.linears_mut()],
            };
            let linears: Vec<&mut Linear> = match group {
                DecoderProducts::Qkv => vec![&mut a.q_proj, &mut a.k_proj, &mut a.v_proj],
                DecoderProducts::AttentionOut => vec![&mut a.o_proj],
                DecoderProducts::Up => blocks
                    .into_iter()
                    .flat_map(|mut b| {
                        let _down = b.pop();
                        b
                    })
                    .collect(),
                DecoderProducts::Down => blocks.into_iter().filter_map(|mut b| b.pop()).collect(),
                DecoderProducts::Head => Vec::new(),
            };
            for l in linears {
                f(l);
            }
        }
    }

    /// The precision its products run in: int8 if any group's do, else bf16 if any
    /// group's do, else exact ([`DecoderModel::set_precision`]).
    pub fn precision(&self) -> Precision {
        let mut all: Vec<Precision> = Vec::new();
        if let Some(h) = &self.head {
            all.push(h.proj.precision());
        }
        for l in &self.decoder.layers {
            all.push(l.self_attn.q_proj.precision());
            all.push(l.self_attn.o_proj.precision());
        }
        if all.contains(&Precision::Int8) {
            Precision::Int8
        } else if all.contains(&Precision::Bf16) {
            Precision::Bf16
        } else {
            Precision::Exact
        }
    }

    /// The same model with another arithmetic ([`DecoderModel::numerics`]).
    pub fn with_numerics(mut self, numerics: Numerics) -> Self {
        self.numerics = numerics;
        self
    }

    /// A freshly initialised model for training (GPT-2's scheme: N(0, 0.02²) weights and
    /// learned positions, residual projections N(0, (0.02/√(2N))²), zero biases, unit
    /// norms; an untied head N(0, 0.02²)).
    pub fn new_random(cfg: ModelConfig, rng: &mut impl Rng) -> Result<DecoderModel> {
        check_decoder_config(&cfg)?;
        let embedding = build::random_embedding(&cfg, rng);
        let positions = match cfg.position {
            PositionKind::Learned => Some(AbsolutePositions::Learned(LearnedPositions::randn(
                cfg.max_positions,
                cfg.d_model,
                0.02,
                rng,
            )?)),
            PositionKind::Sinusoidal => Some(AbsolutePositions::Sinusoidal(
                SinusoidalEncoding::new(cfg.max_positions, cfg.d_model)?,
            )),
            _ => None,
        };
        let decoder = build::random_decoder(&cfg, rng)?;
        let head =
            (!cfg.tie_embeddings).then(|| Head::new_random(cfg.d_model, cfg.vocab_size, rng));
        Ok(DecoderModel {
            embedding,
            positions,
            decoder,
            head,
            config: cfg,
            numerics: Numerics::Lucent,
        })
    }

    /// The tensor of `param` in layer `layer` (ignored for global parameters) as f32
    /// (dequantised if stored quantised), in the shape [`Param::shape`] gives; `None`
    /// when this model has no such parameter (a tied head's `OutputWeight`, an encoder's
    /// token types, …). The reverse of [`DecoderModel::load`]: what an exporter writes
    /// through a family's name table. Errors if `layer` is out of range.
    pub fn parameter(&self, param: Param, layer: usize) -> Result<Option<Tensor>> {
        use crate::nn::{FeedForward, Linear, Norm};
        let weight = |l: &Linear| l.weight.to_f32().map(Some);
        let bias = |l: &Linear| Ok(l.bias.clone());
        let gamma = |n: &Norm| match n {
            Norm::Layer(ln) => Some(ln.weight.clone()),
            Norm::Rms(rms) => Some(rms.weight.clone()),
        };
        let beta = |n: &Norm| match n {
            Norm::Layer(ln) => ln.bias.clone(),
            Norm::Rms(_) => None,
        };
        if !param.per_layer() {
            return match param {
                Param::TokenEmbedding => self.embedding.table.to_f32().map(Some),
                Param::PositionEmbedding => Ok(match &self.positions {
                    Some(AbsolutePositions::Learned(p)) => Some(p.table().clone()),
                    _ => None,
                }),
                Param::FinalNormWeight => Ok(self.decoder.final_norm.as_ref().and_then(gamma)),
                Param::FinalNormBias => Ok(self.decoder.final_norm.as_ref().and_then(beta)),
                Param::OutputWeight => match &self.head {
                    Some(h) => weight(&h.proj),
                    None => Ok(None),
                },
                _ => Ok(None),
            };
        }
        let l = self.decoder.layers.get(layer).ok_or_else(|| {
            Error::Argument(format!(
                "layer {layer} is out of range: the model has layers 0..{}",
                self.decoder.layers.len()
            ))
        })?;
        let a = &l.self_attn;
        let (up, down, gate) = match &l.ffn {
            FeedForward::Mlp { w1, w2, .. } => (Some(w1), Some(w2), None),
            FeedForward::Gated { gate, up, down, .. } => (Some(up), Some(down), Some(gate)),
            FeedForward::Experts(m) => {
                // Each expert's W_gate, W_up or W_down (`which` 0, 1, 2), stacked
                // (n, rows, cols).
                let stack = |which: usize| -> Result<Option<Tensor>> {
                    let mut data = Vec::new();
                    let mut shape = vec![m.n_experts()];
                    for e in &m.experts {
                        let FeedForward::Gated { gate, up, down, .. } = e else {
                            return Ok(None);
                        };
                        let w = [gate, up, down][which].weight.to_f32()?;
                        if shape.len() == 1 {
                            shape.extend_from_slice(w.shape());
                        }
                        data.extend_from_slice(w.data());
                    }
                    Tensor::new(data, &shape).map(Some)
                };
                match param {
                    Param::FfnRouterWeight => return weight(&m.router),
                    Param::FfnGateExpsWeight => return stack(0),
                    Param::FfnUpExpsWeight => return stack(1),
                    Param::FfnDownExpsWeight => return stack(2),
                    _ => (None, None, None),
                }
            }
        };
        match param {
            Param::QueryWeight => weight(&a.q_proj),
            Param::QueryBias => bias(&a.q_proj),
            Param::KeyWeight => weight(&a.k_proj),
            Param::KeyBias => bias(&a.k_proj),
            Param::ValueWeight => weight(&a.v_proj),
            Param::ValueBias => bias(&a.v_proj),
            Param::AttnOutWeight => weight(&a.o_proj),
            Param::AttnOutBias => bias(&a.o_proj),
            Param::QueryNormWeight => Ok(a.q_norm.as_ref().map(|n| n.weight.clone())),
            Param::KeyNormWeight => Ok(a.k_norm.as_ref().map(|n| n.weight.clone())),
            // OLMo 2's only norms sit on the outputs: they are its post-norms.
            Param::AttnPostNormWeight if self.config.norm_placement == NormPlacement::OnOutput => {
                Ok(gamma(&l.self_attn_norm))
            }
            Param::FfnPostNormWeight if self.config.norm_placement == NormPlacement::OnOutput => {
                Ok(gamma(&l.ffn_norm))
            }
            Param::AttnNormWeight | Param::FfnNormWeight
                if self.config.norm_placement == NormPlacement::OnOutput =>
            {
                Ok(None)
            }
            Param::AttnNormWeight => Ok(gamma(&l.self_attn_norm)),
            Param::AttnNormBias => Ok(beta(&l.self_attn_norm)),
            Param::AttnPostNormWeight => Ok(l.self_attn_post_norm.as_ref().and_then(gamma)),
            Param::FfnUpWeight => up.map_or(Ok(None), weight),
            Param::FfnUpBias => up.map_or(Ok(None), bias),
            Param::FfnDownWeight => down.map_or(Ok(None), weight),
            Param::FfnDownBias => down.map_or(Ok(None), bias),
            Param::FfnGateWeight => match gate {
                Some(g) => weight(g),
                None => Ok(None),
            },
            Param::FfnNormWeight => Ok(gamma(&l.ffn_norm)),
            Param::FfnNormBias => Ok(beta(&l.ffn_norm)),
            Param::FfnPostNormWeight => Ok(l.ffn_post_norm.as_ref().and_then(gamma)),
            _ => Ok(None),
        }
    }

    /// A KV cache for one sequence of up to `max_t` positions (capped at the model's
    /// context length). Under llama.cpp's arithmetic it stores f16, as llama.cpp's cache
    /// does (that arithmetic rounds K and V to f16 before they are cached, so nothing is
    /// lost, and each decoded token's attention reads half the bytes); f32 otherwise.
    pub fn new_cache(&self, max_t: usize) -> KvCache {
        let storage = if self.numerics.llama_cpp() {
            KvStorage::F16
        } else {
            KvStorage::F32
        };
        self.decoder
            .new_cache_of(1, max_t.min(self.config.max_positions).max(1), storage)
    }

    /// The longest sequence the model reads (its context).
    pub fn context_len(&self) -> usize {
        self.config.max_positions
    }

    /// Vocabulary logits of hidden states: the head, or the token table when tied, then
    /// the config's logit divisor and soft-cap ([`DecoderModel::finish_logits`]).
    ///
    /// # Shapes
    /// h: (..., d) → (..., V)
    pub fn logits(&self, h: &Tensor) -> Result<Tensor> {
        self.logits_with(h, self.numerics)
    }

    /// [`DecoderModel::logits`] with the products' `numerics`.
    fn logits_with(&self, h: &Tensor, numerics: Numerics) -> Result<Tensor> {
        let z = match &self.head {
            Some(head) => head.logits_with(h, numerics)?,
            None => self.embedding.table.matmul_t(h, numerics)?,
        };
        self.finish_logits(z)
    }

    /// The head's output made logits as the config says, in llama.cpp's order: divided
    /// by `logit_scale` (z ← z · (1/s), Granite), then soft-capped by `final_softcap`
    /// (z ← c·tanh(z · (1/c)), Gemma 2).
    ///
    /// # Shapes
    /// z: (..., V) → (..., V)
    fn finish_logits(&self, mut z: Tensor) -> Result<Tensor> {
        if let Some(s) = self.config.logit_scale {
            z = z.scale(1.0 / s);
        }
        if let Some(c) = self.config.final_softcap {
            if z.tracks_grad() {
                return Err(Error::Config(
                    "final_softcap has no backward rule yet; train without it".into(),
                ));
            }
            z.data_mut()
                .iter_mut()
                .for_each(|x| *x = crate::ops::attention::softcap(*x, c));
        }
        Ok(z)
    }

    /// Embeddings (and absolute positions from `offset`) of a batch.
    ///
    /// # Shapes
    /// ids: b sequences of t → (b, t, d)
    fn embed(&self, ids: &[Vec<usize>], offset: usize) -> Result<Tensor> {
        let x = self.embedding.forward(ids)?; // (b, t, d)
        match &self.positions {
            Some(p) => p.forward(&x, offset), // (b, t, d)
            None => Ok(x),
        }
    }

    /// Logits for every position of a batch of equally long sequences, from scratch (no
    /// cache): what training and evaluation use. `dropout` (in training mode) is applied
    /// to the embeddings before the first layer, as GPT-2 does.
    ///
    /// # Shapes
    /// ids: b sequences of t → (b, t, V)
    pub fn forward_batch(
        &self,
        ids: &[Vec<usize>],
        dropout: Option<&mut Dropout>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let mut x = self.embed(ids, 0)?; // (b, t, d)
        if let Some(d) = dropout {
            x = d.forward(&x)?;
        }
        let opts = AttentionOptions {
            numerics: self.numerics,
            ..AttentionOptions::causal()
        };
        let h = self.decoder.forward(&x, None, &opts, None, None, trace)?; // (b, t, d)
        self.logits(&h) // (b, t, V)
    }

    /// Logits for the positions of `ids`, which follow what `cache` holds (None: `ids`
    /// is the whole sequence). `last_only` computes the head for the last position only
    /// (what generation needs). Errors (before any work) if the sequence would not fit
    /// the cache or the model's context.
    ///
    /// # Shapes
    /// ids: t → (t, V), or (1, V) with `last_only`
    pub fn forward(
        &self,
        ids: &[u32],
        cache: Option<&mut KvCache>,
        last_only: bool,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        // The whole pass on a thread of the runtime's pool: its many small parallel
        // products then split between that thread and the others, instead of waking the
        // pool from outside and waiting for it each time.
        crate::tensor::tape::in_pool(|| {
            if crate::threads::threads() > 1 && !crate::threads::in_team() {
                // Its many parallel loops (~150 small ones for a decoded token) shared by
                // a team that stays awake for the pass instead of the pool's workers,
                // which would fall asleep between them and be woken each time. A traced
                // or intervened pass runs on the team too: which thread computes a row
                // never changes its bits.
                return crate::threads::with_team(|| {
                    self.forward_here(ids, cache, last_only, trace)
                });
            }
            self.forward_here(ids, cache, last_only, trace)
        })
    }

    /// The next-token logits of `n` sequences at once, each one new token (`ids[i]`)
    /// after what its own cache (`caches[i]`) holds: the decode step of continuous
    /// batching. Each weight matrix is read once for all n rows, and every row is
    /// computed exactly as [`DecoderModel::forward`] computes that token alone (the
    /// products row-invariant, attention per sequence over its own cache at its own
    /// position), so row i equals sequence i's lone decode step bit for bit, whatever
    /// else is in the batch. `traces` is empty or holds one optional trace per sequence,
    /// which gets what a lone token's traced forward records in the decoder
    /// (`decoder.layer.L.attn.weights`, `q`, `k`, … and each layer's `output`); a trace
    /// that carries edits (cut to this step's position, `lucent::edits_for_positions`)
    /// has its row run alone, as a lone token's step, the edits applied at its hook
    /// points ([`DecoderModel::decode_batch_edited`]). Errors (before any work) if a
    /// cache is full.
    ///
    /// # Shapes
    /// ids: n → (n, V)
    pub fn decode_batch(
        &self,
        ids: &[u32],
        caches: &mut [&mut KvCache],
        traces: &mut [Option<&mut Trace>],
    ) -> Result<Tensor> {
        let n = ids.len();
        if n == 0 || caches.len() != n || !(traces.is_empty() || traces.len() == n) {
            return Err(Error::Argument(format!(
                "decode_batch needs one new token and one cache per sequence (and 0 or n traces): \
                 got {n} tokens, {} caches, {} traces",
                caches.len(),
                traces.len()
            )));
        }
        for (i, c) in caches.iter().enumerate() {
            let capacity = c
                .layer(0)
                .map_or(0, |l| l.capacity())
                .min(self.config.max_positions);
            if c.len() >= capacity {
                return Err(Error::Argument(format!(
                    "sequence {i} of the batch: its cache is full ({} positions of {capacity}); \
                     end that sequence or give it a longer cache",
                    c.len()
                )));
            }
        }
        if traces.iter().flatten().any(|t| !t.edits().is_empty()) {
            return self.decode_batch_edited(ids, caches, traces);
        }
        let traced = traces.iter().any(Option::is_some);
        // As DecoderModel::forward: on the runtime's pool, one team for a whole untraced step.
        crate::tensor::tape::in_pool(|| {
            if crate::threads::threads() > 1 && !traced && !crate::threads::in_team() {
                return crate::threads::with_team(|| self.decode_batch_here(ids, caches, traces));
            }
            self.decode_batch_here(ids, caches, traces)
        })
    }

    /// [`DecoderModel::decode_batch`] where some rows' traces carry edits (a request's
    /// interventions, cut to this step's position): each such row runs alone through
    /// [`DecoderModel::forward`] (a lone token's step, whose hook points apply the
    /// edits), the others together as a plain batch. No row's numbers depend on the
    /// others: an edited row's are its lone step's, a plain row's are what the plain
    /// batch gives it (batch invariance, as without edits).
    ///
    /// # Shapes
    /// ids: n → (n, V)
    fn decode_batch_edited(
        &self,
        ids: &[u32],
        caches: &mut [&mut KvCache],
        traces: &mut [Option<&mut Trace>],
    ) -> Result<Tensor> {
        let n = ids.len();
        let mut rows: Vec<Option<Tensor>> = vec![None; n];
        let (mut plain_ids, mut plain_at) = (Vec::new(), Vec::new());
        let (mut plain_caches, mut plain_traces) = (Vec::new(), Vec::new());
        for (i, (cache, trace)) in caches.iter_mut().zip(traces.iter_mut()).enumerate() {
            match trace.as_deref_mut() {
                Some(tr) if !tr.edits().is_empty() => {
                    rows[i] =
                        Some(self.forward(&ids[i..i + 1], Some(&mut **cache), true, Some(tr))?);
                    // (1, V)
                }
                tr => {
                    plain_ids.push(ids[i]);
                    plain_at.push(i);
                    plain_caches.push(&mut **cache);
                    plain_traces.push(tr);
                }
            }
        }
        if !plain_ids.is_empty() {
            let traced = plain_traces.iter().any(Option::is_some);
            let mut no_traces: Vec<Option<&mut Trace>> = Vec::new();
            let logits = self.decode_batch(
                &plain_ids,
                &mut plain_caches,
                if traced {
                    &mut plain_traces
                } else {
                    &mut no_traces
                },
            )?; // (m, V)
            for (r, &i) in plain_at.iter().enumerate() {
                rows[i] = Some(logits.narrow(0, r, 1)?); // (1, V)
            }
        }
        let rows = rows
            .into_iter()
            .map(|r| {
                r.ok_or_else(|| Error::Argument("decode_batch: a row was not computed".into()))
            })
            .collect::<Result<Vec<Tensor>>>()?;
        Tensor::cat(&rows.iter().collect::<Vec<_>>(), 0) // (n, V)
    }

    /// [`DecoderModel::decode_batch`] on the calling thread.
    fn decode_batch_here(
        &self,
        ids: &[u32],
        caches: &mut [&mut KvCache],
        traces: &mut [Option<&mut Trace>],
    ) -> Result<Tensor> {
        let n = ids.len();
        if !self.numerics.llama_cpp() {
            // Lucent's own arithmetic has no row-invariant form of its products: each
            // sequence's step runs alone (exact, without the shared weight reads).
            let mut parts = Vec::with_capacity(n);
            for (i, cache) in caches.iter_mut().enumerate() {
                let trace = traces.get_mut(i).and_then(|t| t.as_deref_mut());
                // (1, V)
                parts.push(self.forward_here(&ids[i..i + 1], Some(&mut **cache), true, trace)?);
            }
            return Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0); // (n, V)
        }
        let rows: Vec<Vec<usize>> = ids.iter().map(|&i| vec![i as usize]).collect();
        let mut x = self.embedding.forward(&rows)?; // (n, 1, d)
        if let Some(p) = &self.positions {
            // Each sequence at its own position.
            let parts = caches
                .iter()
                .enumerate()
                .map(|(i, c)| p.forward(&x.narrow(0, i, 1)?, c.len())) // (1, 1, d)
                .collect::<Result<Vec<_>>>()?;
            x = Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)?; // (n, 1, d)
        }
        // llama.cpp's f16 steps with every row's products summed as one row's are: a
        // lone token's arithmetic (one row is the same under LlamaCpp and RowInvariant).
        let numerics = Numerics::RowInvariant;
        let opts = AttentionOptions {
            numerics,
            ..AttentionOptions::causal()
        };
        let d = self.config.d_model;
        let h = self.decoder.decode_batch(&x, caches, &opts, traces)?; // (n, 1, d)
        let h = h.reshape(&[n, d])?; // (n, d)
        self.logits_with(&h, numerics) // (n, V)
    }

    /// [`DecoderModel::forward`] on the calling thread.
    fn forward_here(
        &self,
        ids: &[u32],
        cache: Option<&mut KvCache>,
        last_only: bool,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        self.forward_rows_here(ids, cache, last_only, None, trace)
    }

    /// [`DecoderModel::forward_here`], the head computed for the rows from `from` on
    /// when given ([`DecoderModel::forward_from`]).
    fn forward_rows_here(
        &self,
        ids: &[u32],
        cache: Option<&mut KvCache>,
        last_only: bool,
        from: Option<usize>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let t = ids.len();
        if t == 0 {
            return Err(Error::Argument(
                "no tokens to run the model on; give a non-empty prompt".into(),
            ));
        }
        let past = cache.as_ref().map_or(0, |c| c.len());
        let capacity = cache
            .as_ref()
            .and_then(|c| c.layer(0).map(|l| l.capacity()))
            .unwrap_or(usize::MAX)
            .min(self.config.max_positions);
        if past + t > capacity {
            return Err(Error::Argument(format!(
                "{} tokens ({past} already in context + {t} new) do not fit the context of {capacity} positions; \
                 shorten the prompt or ask for fewer new tokens",
                past + t
            )));
        }
        let ids: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        let x = self.embed(&[ids], past)?; // (1, t, d)
        let opts = AttentionOptions {
            numerics: self.numerics,
            ..AttentionOptions::causal()
        };
        let h = if last_only {
            self.decoder
                .forward_last(&x, None, &opts, None, cache, trace)? // (1, 1, d)
        } else {
            self.decoder.forward(&x, None, &opts, None, cache, trace)? // (1, t, d)
        };
        let d = self.config.d_model;
        let h = if last_only {
            h.reshape(&[1, d])? // (1, d)
        } else {
            h.reshape(&[t, d])? // (t, d)
        };
        match from {
            Some(from) => self.logits(&h.narrow(0, from, t - from)?), // (t - from, V)
            None => self.logits(&h),                                  // (t | 1, V)
        }
    }

    /// Logits for the positions of `ids` from index `from` on (the rows before `from`
    /// only fill `cache`): what scoring a text needs, without the head's cost for the
    /// rows it does not score. Each row equals the same row of [`DecoderModel::forward`]
    /// (the head is a row-by-row product). Errors as [`DecoderModel::forward`] does, or
    /// if `from` is not below `ids.len()`.
    ///
    /// # Shapes
    /// ids: t → (t − from, V)
    pub fn forward_from(
        &self,
        ids: &[u32],
        cache: Option<&mut KvCache>,
        from: usize,
    ) -> Result<Tensor> {
        if from >= ids.len() {
            return Err(Error::Argument(format!(
                "forward_from: row {from} is not one of the {} positions given",
                ids.len()
            )));
        }
        crate::tensor::tape::in_pool(|| {
            if crate::threads::threads() > 1 && !crate::threads::in_team() {
                return crate::threads::with_team(|| {
                    self.forward_rows_here(ids, cache, false, Some(from), None)
                });
            }
            self.forward_rows_here(ids, cache, false, Some(from), None)
        })
    }
}
