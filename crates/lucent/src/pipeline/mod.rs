//! User tasks built on the models: sentence embeddings, similarity and analogies;
//! training small Transformers from scratch.

pub mod embed;
pub mod train;

pub use embed::{Embedder, Pooling};
