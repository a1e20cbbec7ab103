//! Files in and out: safetensors, GGUF, Hugging Face `config.json`, tokenizers, and the
//! model cache with its fetcher.

#[cfg(all(feature = "train", feature = "fetch"))]
pub mod corpus;
pub mod fetch;
pub mod gguf;
pub mod gguf_tokenizer;
pub mod safetensors;
pub mod tokenizer;

pub use self::gguf::GgufFile;
pub use self::gguf_tokenizer::GgufTokenizer;
pub use self::safetensors::SafetensorsFile;
pub use self::tokenizer::{Encoding, HfTokenizer, Tokenizer};
