//! User tasks built on the models: sentence embeddings, similarity and analogies; text
//! generation and chat with decoder models.

pub mod chat;
pub mod embed;
pub mod generate;

pub use chat::{ChatTemplate, Message};
pub use embed::{Embedder, Pooling};
pub use generate::{generate, GenerateOptions, Generation, Sampler, SamplingParams, StopReason};
