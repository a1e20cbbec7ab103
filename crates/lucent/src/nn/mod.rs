//! The guides' building blocks, one concept per file, each opening with its formula.
//!
//! | file | holds |
//! | --- | --- |
//! | `trace` | [`Trace`]: named intermediates of a forward pass (Q, K, V, scores, weights...) |
//! | `edit` | [`Edit`]: writes at the trace's hook points (ablation, patching, steering) |
//! | `linear` | [`Linear`]: y = x·Wᵀ + b |
//! | `embedding` | [`Embedding`]: token ids → vectors |
//! | `norm` | [`LayerNorm`], [`RmsNorm`], [`Norm`] |
//! | `dropout` | [`Dropout`]: inverted dropout, active only in training mode |
//! | `attention` | [`scaled_dot_product_attention`], [`MultiHeadAttention`] (GQA, QK-norm, RoPE, cross) |
//! | `feed_forward` | [`FeedForward`]: MLP and gated (SwiGLU, GeGLU) |
//! | `moe` | [`MixtureOfExperts`]: a router's top-k of n gated expert FFNs, weighted |
//! | `layer` | [`EncoderLayer`], [`DecoderLayer`] in pre-, post- and sandwich-norm form |
//! | `transformer` | [`Encoder`], [`Decoder`], [`Transformer`], [`Head`] |
//! | `mask` | `causal_mask`, `padding_mask`, `prefix_lm_mask`, bidirectional; boolean ↔ additive masks |
//! | `position` | `SinusoidalEncoding`, `LearnedPositions`, `Rope`, `Alibi` |
//! | `kv_cache` | [`KvCache`]: keys and values of past positions for incremental decoding |
//! | `relative_position` | [`RelativePositionBias`]: T5/MPNet bucketed relative positions, a bias on the scores |
//!
//! Every forward is written in terms of [`crate::Tensor`] methods and [`crate::ops`]
//! functions only, and takes an optional [`Trace`].

pub mod attention;
pub mod conv;
pub mod dropout;
pub mod edit;
pub mod embedding;
pub mod feed_forward;
pub mod kv_cache;
pub mod layer;
pub mod linear;
pub mod mask;
pub mod moe;
pub mod norm;
pub mod position;
pub mod relative_position;
pub mod trace;
pub mod transformer;

pub use attention::{
    scaled_dot_product_attention, AttentionConfig, AttentionOptions, MhaOutput, MultiHeadAttention,
    RopeSpec,
};
pub use conv::{Conv1d, ConvStem};
pub use dropout::Dropout;
pub use edit::{Edit, EditOp};
pub use embedding::Embedding;
pub use feed_forward::{FeedForward, FfnKind};
pub use kv_cache::{KvCache, KvStorage, KvStore, LayerKvCache};
pub use layer::{DecoderLayer, EncoderLayer, NormPlacement};
pub use linear::{Linear, Weight};
pub use moe::{MixtureOfExperts, Routing};
pub use norm::{LayerNorm, Norm, NormKind, RmsNorm};
pub use relative_position::{RelativePositionBias, RelativePositionConfig};
pub use trace::{Trace, TraceFilter};
pub use transformer::{Decoder, Encoder, Head, Transformer};
