//! User tasks built on the models: sentence embeddings, similarity and analogies; text
//! generation and chat with decoder models; generating from a training run;
//! exporting a trained model for PyTorch; the perplexity of a decoder on a text; what a
//! GGUF file holds; the word error rate of a transcript.

pub mod chat;
pub mod constrain;
pub mod embed;
pub mod embed_file;
#[cfg(feature = "train")]
pub mod export;
pub mod generate;
pub mod generator;
pub mod inspect;
pub mod perplexity;
pub mod precision;
pub mod tools;
#[cfg(feature = "train")]
pub mod trained;
pub mod transcribe;
pub mod wer;
pub mod words;

pub use chat::{ChatTemplate, Message};
pub use constrain::Constraint;
pub use embed::{Embedder, Pooling};
pub use generate::{
    generate, Decoding, Generation, Sampler, Sampling, Step, StopReason, TextModel, TokenLogprob,
};
pub use generator::{Generator, Stream};
