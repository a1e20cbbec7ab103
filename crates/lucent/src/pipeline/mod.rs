//! User tasks built on the models: sentence embeddings, similarity and analogies.

pub mod embed;

pub use embed::{Embedder, Pooling};
