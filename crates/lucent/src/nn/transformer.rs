//! The stacks: `Encoder`, `Decoder`, the encoder-decoder `Transformer`, and the output
//! `Head` (Vaswani et al. 2017, figure 1).
//!
//! Encoder: x ← layerₙ(… layer₁(x)), then an optional final norm (pre-norm models need
//! it: their residual stream is never normalised otherwise).
//! Decoder: the same over decoder layers, each also reading the encoder output.
//! Transformer: memory = Encoder(src); out = Decoder(tgt, memory), as
//! `torch.nn.Transformer` (which has a final norm on both stacks).
//! Head ("generator"): logits = x · W_vocabᵀ (+ b); P(next) = softmax(logits / T).
//!
//! Embeddings and positions are not part of these stacks: the model layer adds them.

use rand::Rng;

use crate::nn::attention::AttentionOptions;
use crate::nn::kv_cache::{KvCache, KvStorage, LayerKvCache};
use crate::nn::layer::{DecoderLayer, EncoderLayer};
use crate::nn::linear::{Linear, Weight};
use crate::nn::norm::Norm;
use crate::nn::trace::{hook, record_rows, scoped, scoped_each, Trace};
use crate::ops;
use crate::runtime::Numerics;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Check a stack: every layer has layer 0's width, and the final norm (if any) matches.
/// `widths` are the layers' d_model in order; `what` names the stack in errors.
fn check_stack(widths: impl Iterator<Item = usize>, norm: Option<&Norm>, what: &str) -> Result<()> {
    let mut d = None;
    for (i, w) in widths.enumerate() {
        match d {
            None => d = Some(w),
            Some(d0) if d0 != w => {
                return Err(Error::Weights(format!(
                    "{what} layer {i} has d_model {w}, layer 0 has {d0}"
                )))
            }
            _ => {}
        }
    }
    match (norm, d) {
        (Some(n), Some(d)) if n.dim() != d => Err(Error::Weights(format!(
            "{what} final norm has {} features but the layers have d_model {d}",
            n.dim()
        ))),
        _ => Ok(()),
    }
}

/// A stack of encoder layers and an optional final norm.
#[derive(Clone, Debug)]
pub struct Encoder {
    /// The layers, applied in order.
    pub layers: Vec<EncoderLayer>,
    /// A norm after the last layer, if any.
    pub final_norm: Option<Norm>,
}

impl Encoder {
    /// From layers and an optional final norm; checks that the widths agree.
    pub fn new(layers: Vec<EncoderLayer>, final_norm: Option<Norm>) -> Result<Self> {
        let widths = layers.iter().map(|l| l.self_attn.config.d_model);
        check_stack(widths, final_norm.as_ref(), "encoder")?;
        Ok(Encoder { layers, final_norm })
    }

    /// Run the stack; `opts` masks every layer's self-attention (e.g. padding). The
    /// trace gets `encoder.input` (the residual stream's start), `encoder.layer.i.*` and
    /// `encoder.output`.
    ///
    /// # Shapes
    /// x: (b, t, d) → (b, t, d)
    pub fn forward(
        &self,
        x: &Tensor,
        opts: &AttentionOptions,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        scoped(trace, "encoder", |mut trace| {
            // The residual stream's start (a hook point: edits apply here).
            let mut x = hook(&mut trace, "input", x.clone())?;
            for (i, layer) in self.layers.iter().enumerate() {
                x = scoped(trace.as_deref_mut(), &format!("layer.{i}"), |tr| {
                    layer.forward(&x, opts, tr)
                })?;
                if trace.as_deref().is_some_and(|t| t.done_after_layer(i)) {
                    break; // the trace has what it asked for (Trace::stop_when_done)
                }
            }
            if let Some(n) = &self.final_norm {
                x = n.forward(&x)?;
            }
            let x = hook(&mut trace, "output", x)?;
            Ok(x)
        })
    }
}

/// A stack of decoder layers and an optional final norm.
#[derive(Clone, Debug)]
pub struct Decoder {
    /// The layers, applied in order.
    pub layers: Vec<DecoderLayer>,
    /// A norm after the last layer, if any.
    pub final_norm: Option<Norm>,
}

impl Decoder {
    /// From layers and an optional final norm; checks that the widths agree.
    pub fn new(layers: Vec<DecoderLayer>, final_norm: Option<Norm>) -> Result<Self> {
        let widths = layers.iter().map(|l| l.self_attn.config.d_model);
        check_stack(widths, final_norm.as_ref(), "decoder")?;
        Ok(Decoder { layers, final_norm })
    }

    /// An f32 KV cache fitting this stack, for `b` sequences of up to `max_t` positions.
    pub fn new_cache(&self, b: usize, max_t: usize) -> KvCache {
        self.new_cache_of(b, max_t, KvStorage::F32)
    }

    /// A KV cache of `storage` numbers fitting this stack, for `b` sequences of up to
    /// `max_t` positions.
    pub fn new_cache_of(&self, b: usize, max_t: usize, storage: KvStorage) -> KvCache {
        let (h_kv, d_k) = self.layers.first().map_or((0, 0), |l| {
            (l.self_attn.config.n_kv_heads, l.self_attn.config.head_dim)
        });
        KvCache::with_storage(self.layers.len(), b, h_kv, max_t, d_k, storage)
    }

    /// Run the stack. Self-attention is causal (`opts` adds bias/window/offset);
    /// `memory` is the encoder output (None for decoder-only), masked by `memory_bias`.
    /// With a `cache`, `x` holds only the new positions, which attend to everything
    /// cached. The trace gets `decoder.input` (the residual stream's start),
    /// `decoder.layer.i.*` and `decoder.output`.
    ///
    /// # Shapes
    /// x: (b, t, d), memory: (b, t_src, d) → (b, t, d)
    pub fn forward(
        &self,
        x: &Tensor,
        memory: Option<&Tensor>,
        opts: &AttentionOptions,
        memory_bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        self.forward_rows(x, memory, opts, memory_bias, cache, trace, false)
    }

    /// [`Decoder::forward`] for the last position only (b, 1, d): every layer's
    /// attention sees all the positions (and fills the cache), the last layer's
    /// feed-forward block and the final norm only the last one.
    ///
    /// # Shapes
    /// x: (b, t, d), memory: (b, t_src, d) → (b, 1, d)
    pub fn forward_last(
        &self,
        x: &Tensor,
        memory: Option<&Tensor>,
        opts: &AttentionOptions,
        memory_bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        self.forward_rows(x, memory, opts, memory_bias, cache, trace, true)
    }

    /// One decoding step of `n` sequences at once (decoder-only stacks): row i of `x`
    /// is sequence i's new token, attending over its own `caches[i]` at its own
    /// position ([`DecoderLayer::decode_batch`]). Each trace gets `decoder.layer.i.*`
    /// and `decoder.output` as a lone token's forward records them.
    ///
    /// # Shapes
    /// x: (n, 1, d) → (n, 1, d)
    pub fn decode_batch(
        &self,
        x: &Tensor,
        caches: &mut [&mut KvCache],
        opts: &AttentionOptions,
        traces: &mut [Option<&mut Trace>],
    ) -> Result<Tensor> {
        if let Some(c) = caches.iter().find(|c| c.n_layers() != self.layers.len()) {
            return Err(Error::Argument(format!(
                "KvCache has {} layers but the decoder has {}; build it with Decoder::new_cache",
                c.n_layers(),
                self.layers.len()
            )));
        }
        scoped_each(traces, "decoder", |traces| {
            let mut x = x.clone();
            for (i, layer) in self.layers.iter().enumerate() {
                let mut layer_caches: Vec<&mut LayerKvCache> = caches
                    .iter_mut()
                    .map(|c| c.layer_mut(i))
                    .collect::<Result<_>>()?;
                x = scoped_each(traces, &format!("layer.{i}"), |tr| {
                    layer.decode_batch(&x, &mut layer_caches, opts, tr)
                })?;
            }
            if let Some(n) = &self.final_norm {
                x = n.forward(&x)?;
            }
            record_rows(traces, "output", &x)?;
            Ok(x)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn forward_rows(
        &self,
        x: &Tensor,
        memory: Option<&Tensor>,
        opts: &AttentionOptions,
        memory_bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        trace: Option<&mut Trace>,
        last_only: bool,
    ) -> Result<Tensor> {
        let mut cache = cache;
        if let Some(c) = cache.as_deref() {
            if c.n_layers() != self.layers.len() {
                return Err(Error::Argument(format!(
                    "KvCache has {} layers but the decoder has {}; build it with Decoder::new_cache",
                    c.n_layers(),
                    self.layers.len()
                )));
            }
        }
        scoped(trace, "decoder", |mut trace| {
            // The residual stream's start (a hook point: edits apply here).
            let mut x = hook(&mut trace, "input", x.clone())?;
            for (i, layer) in self.layers.iter().enumerate() {
                let layer_cache = match cache.as_deref_mut() {
                    Some(c) => Some(c.layer_mut(i)?),
                    None => None,
                };
                let last = last_only && i + 1 == self.layers.len();
                x = scoped(trace.as_deref_mut(), &format!("layer.{i}"), |tr| {
                    layer.forward_rows(&x, memory, opts, memory_bias, layer_cache, tr, last)
                })?;
                if !last && trace.as_deref().is_some_and(|t| t.done_after_layer(i)) {
                    // The trace has what it asked for (Trace::stop_when_done); keep the
                    // shape the caller expects.
                    if last_only {
                        let [_, t, _] = x.dims()?;
                        x = x.narrow(1, t - 1, 1)?; // (b, 1, d)
                    }
                    break;
                }
            }
            if let Some(n) = &self.final_norm {
                x = n.forward(&x)?;
            }
            let x = hook(&mut trace, "output", x)?;
            Ok(x)
        })
    }
}

/// The encoder-decoder Transformer of the paper (as `torch.nn.Transformer`: encoder
/// stack + final norm, decoder stack + final norm; no embeddings, no head).
#[derive(Clone, Debug)]
pub struct Transformer {
    /// Reads the source.
    pub encoder: Encoder,
    /// Writes the target, attending to the encoder's output.
    pub decoder: Decoder,
}

impl Transformer {
    /// From the two stacks; checks that every decoder layer has cross-attention.
    pub fn new(encoder: Encoder, decoder: Decoder) -> Result<Self> {
        if let Some(i) = decoder.layers.iter().position(|l| l.cross_attn.is_none()) {
            return Err(Error::Config(format!(
                "Transformer: decoder layer {i} has no cross-attention, so it could not read the encoder"
            )));
        }
        Ok(Transformer { encoder, decoder })
    }

    /// memory = encoder(src); out = decoder(tgt, memory). `src_opts` masks the encoder's
    /// self-attention (e.g. source padding), `tgt_opts` adds to the decoder's causal
    /// self-attention mask, `memory_bias` masks cross-attention (usually the source
    /// padding again, shaped (b, 1, t_tgt, t_src)).
    ///
    /// # Shapes
    /// src: (b, t_src, d), tgt: (b, t_tgt, d) → (b, t_tgt, d)
    pub fn forward(
        &self,
        src: &Tensor,
        tgt: &Tensor,
        src_opts: &AttentionOptions,
        tgt_opts: &AttentionOptions,
        memory_bias: Option<&Tensor>,
        trace: Option<&mut Trace>,
    ) -> Result<Tensor> {
        let mut trace = trace;
        let memory = self.encoder.forward(src, src_opts, trace.as_deref_mut())?;
        self.decoder
            .forward(tgt, Some(&memory), tgt_opts, memory_bias, None, trace)
    }
}

/// The output head ("generator"): a linear map to vocabulary logits, and softmax with
/// temperature for next-token probabilities.
#[derive(Clone, Debug)]
pub struct Head {
    /// W_vocab: (V, d), bias (V) if any.
    pub proj: Linear,
}

impl Head {
    /// From a projection (V, d).
    pub fn new(proj: Linear) -> Self {
        Head { proj }
    }

    /// Tied to the token embedding table (V, d), as GPT-2, LLaMA-small and Gemma do.
    pub fn tied(table: &Tensor) -> Result<Self> {
        Ok(Head {
            proj: Linear::new(table.clone(), None)?,
        })
    }

    /// Tied to a token table that may be quantised: the head reads the same blocks.
    pub fn tied_to(table: &Weight) -> Result<Self> {
        Ok(Head {
            proj: Linear::new(table.clone(), None)?,
        })
    }

    /// Random N(0, 0.02²) weights, no bias.
    pub fn new_random(d_model: usize, vocab: usize, rng: &mut impl Rng) -> Self {
        Head {
            proj: Linear::new_random(d_model, vocab, false, 0.02, rng),
        }
    }

    /// Vocabulary logits.
    ///
    /// # Shapes
    /// x: (..., d) → (..., V)
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        self.proj.forward(x)
    }

    /// Vocabulary logits with `numerics` (a quantised head's rows follow its orders).
    ///
    /// # Shapes
    /// x: (..., d) → (..., V)
    pub fn logits_with(&self, x: &Tensor, numerics: Numerics) -> Result<Tensor> {
        self.proj.forward_with(x, numerics)
    }

    /// softmax(logits / T): T < 1 sharpens, T > 1 flattens; T must be > 0.
    ///
    /// # Shapes
    /// x: (..., d) → (..., V)
    pub fn probabilities(&self, x: &Tensor, temperature: f32) -> Result<Tensor> {
        ops::softmax_with_temperature(&self.logits(x)?, temperature)
    }
}
