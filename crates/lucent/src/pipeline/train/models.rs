//! The two models lucent trains from scratch, assembled from the same `nn` blocks the
//! pretrained models use.
//!
//! - [`Gpt`]: a decoder-only language model (GPT-2's shape): token embedding + learned
//!   positions → N pre-norm decoder layers (causal self-attention, tanh-GELU MLP) →
//!   final LayerNorm → head tied to the token embedding: logits = h · Eᵀ.
//! - [`Seq2Seq`]: the guides' encoder-decoder (Vaswani et al.): embeddings × √d +
//!   sinusoidal positions → post-norm encoder → post-norm decoder with cross-attention
//!   → linear head.
//!
//! Both hand out their parameters by name ([`Parameters`]) and run the same forward for
//! training (parameters marked with `requires_grad`) and inference (plain tensors or
//! inside `no_grad`).

use rand::Rng;

use crate::autograd::params::join;
use crate::autograd::{no_grad, Parameters, ParamsMut};
use crate::model::config::{ModelKind, NormPlacement, PositionKind};
use crate::model::presets::preset;
use crate::model::ModelConfig;
use crate::nn::position::{LearnedPositions, SinusoidalEncoding};
use crate::nn::{AttentionOptions, Decoder, Dropout, Embedding, Head, KvCache, Trace, Transformer};
use crate::ops;
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The dimensions of a small model to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dims {
    /// Layers (of each stack).
    pub layers: usize,
    /// Model width d.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width (4·d when built from the command line).
    pub d_ff: usize,
    /// Longest sequence (context length, "block size").
    pub block: usize,
    /// Vocabulary size.
    pub vocab: usize,
}

impl Dims {
    fn check(&self) -> Result<()> {
        if self.layers == 0
            || self.d_model == 0
            || self.heads == 0
            || self.block == 0
            || self.vocab == 0
        {
            return Err(Error::Config(format!(
                "layers, d_model, heads, block and vocab must all be > 0, got {self:?}"
            )));
        }
        ModelConfig::head_dim_for(self.d_model, self.heads)?;
        Ok(())
    }

    /// The named preset with these dimensions (`layers` for every stack the preset
    /// has), checked.
    fn config_from(&self, preset_name: &str) -> Result<ModelConfig> {
        self.check()?;
        let mut cfg = preset(preset_name)?;
        cfg.vocab_size = self.vocab;
        cfg.d_model = self.d_model;
        if cfg.encoder_layers > 0 {
            cfg.encoder_layers = self.layers;
        }
        cfg.decoder_layers = self.layers;
        cfg.n_heads = self.heads;
        cfg.n_kv_heads = self.heads;
        cfg.head_dim = self.d_model / self.heads;
        cfg.d_ff = self.d_ff;
        cfg.max_positions = self.block;
        Ok(cfg)
    }
}

/// A GPT-2-shaped decoder-only language model.
#[derive(Clone, Debug)]
pub struct Gpt {
    /// The model's configuration (family "gpt2", kind decoder).
    pub config: ModelConfig,
    /// Token embedding E (V, d); also the output head (tied).
    pub embed: Embedding,
    /// Learned positions P (block, d).
    pub positions: LearnedPositions,
    /// The decoder stack (pre-norm, with the final LayerNorm).
    pub decoder: Decoder,
}

impl Gpt {
    /// The config of a GPT-2-style model with these dimensions.
    pub fn config_for(d: &Dims) -> Result<ModelConfig> {
        let mut cfg = d.config_from("gpt2")?;
        cfg.family = "gpt".into();
        cfg.validate()?;
        Ok(cfg)
    }

    /// A freshly initialised model: N(0, 0.02²) weights, residual projections
    /// N(0, (0.02/√(2N))²), zero biases, unit norms (GPT-2's scheme).
    pub fn new_random(d: &Dims, rng: &mut impl Rng) -> Result<Self> {
        let config = Gpt::config_for(d)?;
        let embed = Embedding::new_random_for(&config, rng);
        let positions = LearnedPositions::randn(d.block, d.d_model, 0.02, rng)?;
        let decoder = Decoder::new_random(&config, rng)?;
        Ok(Gpt {
            config,
            embed,
            positions,
            decoder,
        })
    }

    /// Context length (positions the model knows).
    pub fn block(&self) -> usize {
        self.positions.max_len()
    }

    /// Logits for every position.
    ///
    /// # Shapes
    /// ids: b sequences of t ≤ block ids → (b, t, V)
    pub fn forward(&self, ids: &[Vec<usize>]) -> Result<Tensor> {
        self.forward_from(ids, 0, None)
    }

    /// Logits for `ids` placed at positions `offset ..`, reading and extending `cache`.
    ///
    /// # Shapes
    /// ids: b sequences of t ids → (b, t, V)
    pub fn forward_from(
        &self,
        ids: &[Vec<usize>],
        offset: usize,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let x = self.embed.forward(ids)?; // (b, t, d)
        let x = self.positions.forward(&x, offset)?; // (b, t, d)
        let h = self
            .decoder
            .forward(&x, None, &AttentionOptions::causal(), None, cache, None)?; // (b, t, d)
        self.embed.table.matmul_t(&h, Numerics::Lucent) // (b, t, V): the head tied to the embeddings
    }

    /// Mean next-token cross-entropy of `targets` given `ids` (same shapes).
    pub fn loss(&self, ids: &[Vec<usize>], targets: &[Vec<usize>]) -> Result<Tensor> {
        self.loss_with_dropout(ids, targets, None)
    }

    /// [`Gpt::loss`] with GPT-2's embedding dropout: `dropout` (in training mode) is
    /// applied to token + position embeddings before the first layer.
    pub fn loss_with_dropout(
        &self,
        ids: &[Vec<usize>],
        targets: &[Vec<usize>],
        dropout: Option<&mut Dropout>,
    ) -> Result<Tensor> {
        let x = self.embed.forward(ids)?; // (b, t, d)
        let mut x = self.positions.forward(&x, 0)?; // (b, t, d)
        if let Some(d) = dropout {
            x = d.forward(&x)?;
        }
        let h = self
            .decoder
            .forward(&x, None, &AttentionOptions::causal(), None, None, None)?; // (b, t, d)
        let logits = self.embed.table.matmul_t(&h, Numerics::Lucent)?; // (b, t, V): tied head
        ops::cross_entropy(&logits, &targets.concat(), None)
    }

    /// Sample `n` tokens after `prompt` with temperature `temperature` (0 = greedy),
    /// using a KV cache; the context slides when it would pass the block size.
    pub fn sample(
        &self,
        prompt: &[usize],
        n: usize,
        temperature: f32,
        rng: &mut impl Rng,
    ) -> Result<Vec<usize>> {
        if prompt.is_empty() {
            return Err(Error::Argument(
                "sampling needs a prompt of at least one token".into(),
            ));
        }
        no_grad(|| {
            let block = self.block();
            let mut out = prompt.to_vec();
            let mut cache = self.decoder.new_cache(1, block);
            let start = out.len().saturating_sub(block);
            let mut logits = self.forward_from(&[out[start..].to_vec()], 0, Some(&mut cache))?;
            for _ in 0..n {
                let v = logits.last_dim();
                let last = &logits.data()[logits.numel() - v..];
                let next = pick(last, temperature, rng)?;
                out.push(next);
                if cache.len() >= block {
                    // The context is full: re-encode the last block − 1 tokens.
                    cache.clear();
                    let ctx = out[out.len() - (block - 1).max(1)..].to_vec();
                    logits = self.forward_from(&[ctx], 0, Some(&mut cache))?;
                } else {
                    let pos = cache.len();
                    logits = self.forward_from(&[vec![next]], pos, Some(&mut cache))?;
                }
            }
            Ok(out)
        })
    }
}

/// Choose a token from one row of logits: argmax at temperature 0, else a draw from
/// softmax(logits / T).
pub fn pick(logits: &[f32], temperature: f32, rng: &mut impl Rng) -> Result<usize> {
    if temperature <= 0.0 {
        return Ok(Tensor::from_slice(logits).argmax_rows()[0]);
    }
    let mut p = logits.to_vec();
    ops::softmax::softmax_row(&mut p, temperature);
    let r: f32 = rng.random();
    let mut acc = 0.0;
    for (i, &pi) in p.iter().enumerate() {
        acc += pi;
        if r < acc {
            return Ok(i);
        }
    }
    Ok(p.len() - 1)
}

impl Parameters for Gpt {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.embed.visit_params(&join(prefix, "embed"), f);
        self.positions.visit_params(&join(prefix, "positions"), f);
        self.decoder.visit_params(&join(prefix, "decoder"), f);
    }
}

/// The guides' encoder-decoder Transformer for sequence-to-sequence tasks.
#[derive(Clone, Debug)]
pub struct Seq2Seq {
    /// The model's configuration (family "transformer", kind encoder-decoder).
    pub config: ModelConfig,
    /// Shared source/target embedding (V, d), scaled by √d.
    pub embed: Embedding,
    /// Sinusoidal positions (no parameters).
    pub positions: SinusoidalEncoding,
    /// Encoder and decoder stacks (post-norm, cross-attention).
    pub transformer: Transformer,
    /// Output projection (d → V).
    pub head: Head,
}

impl Seq2Seq {
    /// The config of the guides' encoder-decoder with these dimensions.
    pub fn config_for(d: &Dims) -> Result<ModelConfig> {
        let mut cfg = d.config_from("transformer-base")?;
        cfg.embedding_scale = (d.d_model as f32).sqrt();
        cfg.tie_embeddings = false;
        debug_assert!(cfg.kind == ModelKind::EncoderDecoder);
        debug_assert!(
            cfg.norm_placement == NormPlacement::Post && cfg.position == PositionKind::Sinusoidal
        );
        cfg.validate()?;
        Ok(cfg)
    }

    /// A freshly initialised model (GPT-2's normal init; embeddings N(0, 1/d) so that
    /// after the √d scale they are unit-sized, as in the paper's setup).
    pub fn new_random(d: &Dims, rng: &mut impl Rng) -> Result<Self> {
        let config = Seq2Seq::config_for(d)?;
        let embed = Embedding::new_random(
            d.vocab,
            d.d_model,
            1.0 / (d.d_model as f32).sqrt(),
            config.embedding_scale,
            rng,
        );
        let positions = SinusoidalEncoding::new(d.block, d.d_model)?;
        let transformer = Transformer::new_random(&config, rng)?;
        let head = Head::new_random(d.d_model, d.vocab, rng);
        Ok(Seq2Seq {
            config,
            embed,
            positions,
            transformer,
            head,
        })
    }

    /// The additive mask that hides padding keys of `src` (PAD after the last symbol)
    /// from `t_q` queries: (b, 1, t_q, s), 0 or −∞; `None` when nothing is padded.
    pub fn padding_bias(src: &[Vec<usize>], t_q: usize) -> Option<Tensor> {
        let s = src.first().map_or(0, Vec::len);
        let lens: Vec<usize> = src
            .iter()
            .map(|r| {
                r.iter()
                    .position(|&id| id == super::data::PAD)
                    .unwrap_or(r.len())
            })
            .collect();
        if lens.iter().all(|&l| l == s) {
            return None;
        }
        Some(Tensor::from_fn(&[src.len(), 1, t_q, s], |i| {
            let (bi, j) = (i / (t_q * s), i % s);
            if j < lens[bi] {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        }))
    }

    fn embed_at(&self, ids: &[Vec<usize>], offset: usize) -> Result<Tensor> {
        let x = self.embed.forward(ids)?; // (b, t, d)
        self.positions.forward(&x, offset)
    }

    /// The encoder's output for `src`.
    ///
    /// # Shapes
    /// src: b sequences of s ids → (b, s, d)
    pub fn encode(&self, src: &[Vec<usize>]) -> Result<Tensor> {
        let s = src.first().map_or(0, Vec::len);
        let bias = Seq2Seq::padding_bias(src, s);
        let opts = AttentionOptions {
            bias: bias.as_ref(),
            ..AttentionOptions::none()
        };
        self.transformer
            .encoder
            .forward(&self.embed_at(src, 0)?, &opts, None)
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
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let mut trace = trace;
        let s = src.first().map_or(0, Vec::len);
        let t = tgt_in.first().map_or(0, Vec::len);
        let src_bias = Seq2Seq::padding_bias(src, s);
        let memory_bias = Seq2Seq::padding_bias(src, t);
        let src_opts = AttentionOptions {
            bias: src_bias.as_ref(),
            ..AttentionOptions::none()
        };
        let memory = self.transformer.encoder.forward(
            &self.embed_at(src, 0)?,
            &src_opts,
            trace.as_deref_mut(),
        )?;
        let h = self.transformer.decoder.forward(
            &self.embed_at(tgt_in, 0)?,
            Some(&memory),
            &AttentionOptions::causal(),
            memory_bias.as_ref(),
            None,
            trace,
        )?;
        self.head.logits(&h)
    }

    /// Mean cross-entropy of `tgt_out` (ignoring `pad`) given `src` and `tgt_in`.
    pub fn loss(
        &self,
        src: &[Vec<usize>],
        tgt_in: &[Vec<usize>],
        tgt_out: &[Vec<usize>],
        pad: usize,
    ) -> Result<Tensor> {
        let logits = self.forward(src, tgt_in, None)?;
        ops::cross_entropy(&logits, &tgt_out.concat(), Some(pad))
    }

    /// Greedy decoding with the decoder's KV cache: start from `bos`, stop at `eos` or
    /// after `max_len` tokens. Returns each sequence's tokens (without BOS/EOS).
    pub fn greedy(
        &self,
        src: &[Vec<usize>],
        bos: usize,
        eos: usize,
        max_len: usize,
    ) -> Result<Vec<Vec<usize>>> {
        no_grad(|| {
            let b = src.len();
            let memory = self.encode(src)?;
            let memory_bias = Seq2Seq::padding_bias(src, 1);
            let mut cache = self.transformer.decoder.new_cache(b, max_len + 1);
            let mut current: Vec<Vec<usize>> = vec![vec![bos]; b];
            let mut out: Vec<Vec<usize>> = vec![Vec::new(); b];
            let mut done = vec![false; b];
            for step in 0..max_len {
                let x = self.embed_at(&current, step)?; // (b, 1, d)
                let h = self.transformer.decoder.forward(
                    &x,
                    Some(&memory),
                    &AttentionOptions::causal(),
                    memory_bias.as_ref(),
                    Some(&mut cache),
                    None,
                )?;
                let logits = self.head.logits(&h)?; // (b, 1, V)
                let next = logits.argmax_rows();
                for i in 0..b {
                    if !done[i] {
                        if next[i] == eos {
                            done[i] = true;
                        } else {
                            out[i].push(next[i]);
                        }
                    }
                    current[i] = vec![next[i]];
                }
                if done.iter().all(|&d| d) {
                    break;
                }
            }
            Ok(out)
        })
    }
}

impl Parameters for Seq2Seq {
    fn visit_params(&mut self, prefix: &str, f: &mut ParamsMut) {
        self.embed.visit_params(&join(prefix, "embed"), f);
        self.transformer.visit_params(prefix, f);
        self.head.visit_params(&join(prefix, "head"), f);
    }
}
