//! lucent's one error type. Every fallible step returns [`Result`], and every message
//! names the file, tensor, key or argument at fault and, where it can, says what to do.

use std::path::PathBuf;

/// Everything that can go wrong in lucent, as a value (no panics on user input).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Two shapes that had to agree do not. `op` names the operation.
    #[error("{op}: shape mismatch: {lhs:?} vs {rhs:?}")]
    ShapeMismatch {
        /// The operation that checked the shapes.
        op: String,
        /// The first shape.
        lhs: Vec<usize>,
        /// The second shape.
        rhs: Vec<usize>,
    },
    /// A shape that is wrong on its own (wrong rank, zero length, too many elements...).
    #[error("{0}")]
    Shape(String),
    /// A model configuration that cannot work (e.g. d_model not divisible by heads).
    #[error("invalid config: {0}")]
    Config(String),
    /// A bad argument from the user (unknown preset, zero length...).
    #[error("{0}")]
    Argument(String),
    /// A weight file is missing a tensor, or has one of the wrong shape or dtype.
    #[error("{0}")]
    Weights(String),
    /// A file could not be parsed (safetensors, GGUF, JSON...).
    #[error("{path}: {msg}")]
    Format {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// An I/O error, with the file it concerns.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder at fault.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Fetching a model or data set failed.
    #[error("fetch: {0}")]
    Fetch(String),
    /// A tokenizer failed to load or to encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Training hit a state it cannot continue from (NaN loss, unreadable checkpoint...).
    #[error("training: {0}")]
    Training(String),
}

/// lucent's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error about `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A format error about `path`.
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            msg: msg.into(),
        }
    }

    /// A shape mismatch found by `op`.
    pub fn mismatch(op: impl Into<String>, lhs: &[usize], rhs: &[usize]) -> Self {
        Error::ShapeMismatch {
            op: op.into(),
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
        }
    }
}

/// Return early with an [`Error::Argument`] built from a format string.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::Error::Argument(format!($($arg)*)))
    };
}
