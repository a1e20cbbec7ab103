//! The family registry: every model lucent knows by name, with its kind (encoder,
//! decoder, encoder-decoder) and family, so that a caller knows what `open("NAME")` will
//! give before anything is fetched. Where each one's files come from is
//! [`crate::io::fetch::KNOWN`]; a test holds the two tables to the same names.

use crate::model::ModelKind;

/// A model lucent knows by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownModel {
    /// The short name (`minilm`, `smollm2`, …).
    pub name: &'static str,
    /// What it is.
    pub kind: ModelKind,
    /// The family that reads it (its config translation and name table).
    pub family: &'static str,
    /// What it is for, in a few words.
    pub task: &'static str,
}

/// Every model lucent knows by name.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "minilm",
        kind: ModelKind::Encoder,
        family: "bert",
        task: "sentence embeddings",
    },
    KnownModel {
        name: "mpnet",
        kind: ModelKind::Encoder,
        family: "mpnet",
        task: "sentence embeddings",
    },
    KnownModel {
        name: "smollm2",
        kind: ModelKind::Decoder,
        family: "llama",
        task: "text generation, chat",
    },
    KnownModel {
        name: "gemma3",
        kind: ModelKind::Decoder,
        family: "gemma3",
        task: "text generation, chat",
    },
    KnownModel {
        name: "whisper-tiny.en",
        kind: ModelKind::EncoderDecoder,
        family: "whisper",
        task: "speech to text (English)",
    },
    KnownModel {
        name: "whisper-base",
        kind: ModelKind::EncoderDecoder,
        family: "whisper",
        task: "speech to text (99 languages)",
    },
];

/// The known model called `name`, if any.
pub fn known_model(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}
