//! # lucent
//!
//! A Transformer engine: every building block the classic guides describe, running real
//! pretrained models and training small ones on a CPU, able to show every intermediate
//! step of its own arithmetic.
//!
//! Layers, each depending only on those below it:
//!
//! | module | holds |
//! | --- | --- |
//! | [`patching`] | activation patching, layer × position ([`Model::patching_sweep`]) |
//! | [`pipeline`] | user tasks: embeddings, similarity, analogies, generation, transcription, export |
//! | [`train`] | the parameter visitor, optimisers and schedule, the training loop, checkpoints, runs |
//! | [`model`] | `ModelConfig`, the generic Transformer, families, loading, parameter counts |
//! | [`nn`] | the guides' building blocks and the KV cache |
//! | [`autograd`] | gradient recording on/off, data-parallel backward |
//! | [`ops`] | kernels with their backward rules beside them: matmul, softmax, norms, activations, rope, attention, quantised products |
//! | [`tensor`] | `Tensor`: shape + f32 storage, owned or memory-mapped; its gradient tape; quantised block types |
//! | [`io`] | safetensors, GGUF, CTranslate2, configs, tokenizers, audio, model cache and fetch |
//! | [`runtime`] | the thread pool lucent owns ([`Runtime`]), CPU features and the instruction-set cap ([`Isa`]) |
//! | [`bench`] | timings of the (private) kernels beside their twins, for `lucent bench kernels` |
//! | [`viz`] | heatmaps of attention, masks and positions (PNG/SVG) |
//!
//! Errors are values: every fallible function returns [`Result`].
#![warn(missing_docs)]

mod api;
mod attribution;
pub mod autograd;
pub mod bench;
pub mod error;
mod intervene;
pub mod io;
pub mod model;
pub mod nn;
pub mod ops;
pub mod patching;
pub mod pipeline;
pub mod runtime;
pub mod tensor;
#[cfg(feature = "train")]
pub mod train;
#[cfg(feature = "viz")]
pub mod viz;

pub use api::{open, open_with, Model, OpenOptions, Token};
pub use attribution::{log_prob, AblationEffect, Attribution, HeadAblation};
pub use error::{Error, Result};
pub use intervene::{decoder_edits, edits_for_positions, CachedDecoding, Intervened};
pub use model::hooks::{HookPoint, Intervention, InterventionOp, InterventionValue};
pub use model::{ModelConfig, ModelKind};
pub use nn::{Trace, TraceFilter};
pub use patching::PatchSweep;
pub use pipeline::chat::Message;
pub use pipeline::embed::Embedder;
pub use pipeline::generate::{Generation, Sampling, StopReason};
pub use pipeline::generator::{Generator, Stream};
pub use runtime::threads;
pub use runtime::{Isa, Numerics, Precision, Runtime};
pub use tensor::{Dtype, Tensor};
pub use threads::{set_threads, threads};
