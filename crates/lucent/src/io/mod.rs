//! Files in and out: safetensors, GGUF, CTranslate2, Hugging Face `config.json`,
//! tokenizers, audio (WAV files and Whisper's log-mel features), and the model cache with
//! its fetcher.

pub mod audio;
#[cfg(all(feature = "train", feature = "fetch"))]
pub mod corpus;
pub mod ctranslate2;
pub mod fetch;
pub mod gguf;
pub mod gguf_tokenizer;
pub mod mel;
pub mod npy;
pub mod pre_tokenizers;
pub mod resident;
pub mod safetensors;
pub mod tokenizer;

pub use self::audio::AudioStream;
pub use self::ctranslate2::{Ct2File, Ct2Folder, WhisperConfig};
pub use self::gguf::GgufFile;
pub use self::gguf_tokenizer::GgufTokenizer;
pub use self::safetensors::SafetensorsFile;
pub use self::tokenizer::{Encoding, HfTokenizer, Tokenizer};
