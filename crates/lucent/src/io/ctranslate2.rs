//! Reading CTranslate2 model folders: `model.bin` (the weights), `config.json` (decoding
//! settings) and `tokenizer.json`. This is how the Whisper models reach lucent.
//!
//! # `model.bin`
//!
//! A flat little-endian file with no padding, written by CTranslate2's Python converter
//! (`ctranslate2/specs/model_spec.py`). Binary versions 4 to 6 share this layout:
//!
//! ```text
//! u32 binary version | string spec name | u32 spec revision | u32 count
//! count × ( string name | u8 rank | u32 dims[rank] | u8 dtype | u32 nbytes | nbytes bytes )
//! u32 n_aliases | n_aliases × ( string alias | string target )
//! string = u16 length (counting a trailing NUL) | the bytes | NUL
//! dtype  = 0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16
//! ```
//!
//! Shapes are outermost first (a linear layer's weight is `(out, in)`, as in PyTorch).
//! Data starts wherever the previous field ended, so it is rarely 4-byte aligned: f32
//! variables are copied out of the map when they are not, f16 / bf16 widen to f32 on
//! request ([`Ct2File::tensor`]), integer variables are read as scalars
//! ([`Ct2File::scalar_int`]) or, for CTranslate2's int8 / int16 quantised weights,
//! multiplied back by their `NAME_scale` ([`Ct2File::dequantized`]).
//!
//! Every length and count is checked against the file before it is used: a truncated or
//! hostile file gives an [`Error::Format`] naming the file and the field (`variable 12
//! (encoder/conv1/weight): nbytes ...`), never a panic or an allocation the file cannot
//! back. Unlike CTranslate2 (which ignores them), bytes after the alias table are an
//! error, and so is an alias to a variable that does not exist.
//!
//! # The Whisper variables (`WhisperSpec`, revision 3)
//!
//! Both `whisper-tiny.en` (148 variables, d = 384, 4 + 4 layers, vocabulary 51864) and
//! `whisper-base` (212 variables, d = 512, 6 + 6 layers, vocabulary 51865) store, with
//! `d` the model width, `f = 4d` the feed-forward width and `l` the layer index:
//!
//! | variable | shape | dtype |
//! | --- | --- | --- |
//! | `encoder/conv1/weight`, `/bias` | (d, 80, 3), (d) | f16 |
//! | `encoder/conv2/weight`, `/bias` | (d, d, 3), (d) | f16 |
//! | `encoder/position_encodings/encodings` | (1500, d) | f16 (sinusoids, stored) |
//! | `encoder/layer_{l}/self_attention/layer_norm/{gamma,beta}` | (d) | f16 |
//! | `encoder/layer_{l}/self_attention/linear_0/{weight,bias}` | (3d, d), (3d) | f16: fused Q, K, V (K's bias rows are 0) |
//! | `encoder/layer_{l}/self_attention/linear_1/{weight,bias}` | (d, d), (d) | f16: output projection |
//! | `encoder/layer_{l}/ffn/layer_norm/{gamma,beta}` | (d) | f16 |
//! | `encoder/layer_{l}/ffn/linear_0/{weight,bias}` | (f, d), (f) | f16 |
//! | `encoder/layer_{l}/ffn/linear_1/{weight,bias}` | (d, f), (d) | f16 |
//! | `encoder/layer_norm/{gamma,beta}` | (d) | f16: final norm |
//! | `encoder/num_heads` | () | i16 (6 tiny, 8 base) |
//! | `decoder/embeddings/weight` | (vocab, d) | f16 |
//! | `decoder/position_encodings/encodings` | (448, d) | f16 (learned) |
//! | `decoder/layer_{l}/self_attention/layer_norm/{gamma,beta}` | (d) | f16 |
//! | `decoder/layer_{l}/self_attention/linear_0/{weight,bias}` | (3d, d), (3d) | f16: fused Q, K, V |
//! | `decoder/layer_{l}/self_attention/linear_1/{weight,bias}` | (d, d), (d) | f16 |
//! | `decoder/layer_{l}/attention/layer_norm/{gamma,beta}` | (d) | f16: cross-attention's norm |
//! | `decoder/layer_{l}/attention/linear_0/{weight,bias}` | (d, d), (d) | f16: cross-attention Q |
//! | `decoder/layer_{l}/attention/linear_1/{weight,bias}` | (2d, d), (2d) | f16: fused cross K, V of the encoder output |
//! | `decoder/layer_{l}/attention/linear_2/{weight,bias}` | (d, d), (d) | f16: cross-attention output |
//! | `decoder/layer_{l}/ffn/...` | as the encoder's | f16 |
//! | `decoder/layer_norm/{gamma,beta}` | (d) | f16 |
//! | `decoder/num_heads` | () | i16 |
//! | `decoder/activation` | () | i8: 3 = GELU with erf (CTranslate2's `Activation`: 0 ReLU, 1 GELU-tanh, 2 SiLU, 3 GELU, 4 GELU-sigmoid, 5 tanh, 6 sigmoid) |
//! | `decoder/pre_norm` | () | i8: 1 (layer norm before each block) |
//! | `decoder/scale_embeddings`, `decoder/alibi`, `decoder/start_from_zero_embedding` | () | i8: 0 |
//! | `decoder/alignment_layer`, `decoder/alignment_heads` | () | i16: −1 and 1, the generic Transformer spec's defaults, unused by Whisper (config.json's `alignment_heads` serve) |
//!
//! and one alias, `decoder/projection/weight` → `decoder/embeddings/weight`: the output
//! layer is tied to the token embedding.
//!
//! # `config.json`
//!
//! For Whisper ([`WhisperConfig`]): `alignment_heads` (pairs `[layer, head]` of decoder
//! cross-attention heads whose weights follow the audio; 8 pairs in both models),
//! `suppress_ids` (token ids never generated: 90 in tiny.en, 88 in base),
//! `suppress_ids_begin` (ids not allowed as the first generated token: `[220, EOT]`),
//! `lang_ids` (the language tokens `<|en|>` … in vocabulary order: 99 in base,
//! 50259–50357). Surprising: tiny.en's file lists 98 `lang_ids`, 50259–50356, which in its
//! English-only vocabulary are `<|zh|>` … (its `<|en|>` is 50258): the converter's list
//! is off by one there, and an English-only model must not use it (it has no language or
//! task tokens in its prompt). Also: `tokenizer.json` holds no timestamp tokens (50363
//! ids in tiny.en's, 50364 in base's, against embeddings of 51864 / 51865 rows): ids from
//! `<|notimestamps|>` + 1 on are the timestamps `<|0.00|>` … `<|30.00|>`, which the decoder
//! names itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::io::tokenizer::HfTokenizer;
use crate::tensor::{Dtype, Tensor};
use crate::{Error, Result};

/// The binary versions whose layout this reader knows (see the module doc).
pub const BINARY_VERSIONS: std::ops::RangeInclusive<u32> = 4..=6;

/// The most dimensions a variable may have (CTranslate2's models use at most 3).
pub const MAX_RANK: usize = 8;

/// The element type of a stored variable, with CTranslate2's numeric codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ct2Dtype {
    /// 0: IEEE single precision.
    F32,
    /// 1: signed 8-bit integer (flags, int8 quantised weights).
    I8,
    /// 2: signed 16-bit integer (head counts, int16 quantised weights).
    I16,
    /// 3: signed 32-bit integer.
    I32,
    /// 4: IEEE half precision.
    F16,
    /// 5: bfloat16.
    BF16,
}

impl Ct2Dtype {
    /// The dtype of CTranslate2's code `code`, if it is one.
    pub fn from_code(code: u8) -> Option<Ct2Dtype> {
        Some(match code {
            0 => Ct2Dtype::F32,
            1 => Ct2Dtype::I8,
            2 => Ct2Dtype::I16,
            3 => Ct2Dtype::I32,
            4 => Ct2Dtype::F16,
            5 => Ct2Dtype::BF16,
            _ => return None,
        })
    }

    /// CTranslate2's code of this dtype.
    pub fn code(self) -> u8 {
        match self {
            Ct2Dtype::F32 => 0,
            Ct2Dtype::I8 => 1,
            Ct2Dtype::I16 => 2,
            Ct2Dtype::I32 => 3,
            Ct2Dtype::F16 => 4,
            Ct2Dtype::BF16 => 5,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Ct2Dtype::I8 => 1,
            Ct2Dtype::I16 | Ct2Dtype::F16 | Ct2Dtype::BF16 => 2,
            Ct2Dtype::F32 | Ct2Dtype::I32 => 4,
        }
    }

    /// The floating-point [`Dtype`] this is, if it is one.
    pub fn float(self) -> Option<Dtype> {
        match self {
            Ct2Dtype::F32 => Some(Dtype::F32),
            Ct2Dtype::F16 => Some(Dtype::F16),
            Ct2Dtype::BF16 => Some(Dtype::BF16),
            _ => None,
        }
    }
}

impl std::fmt::Display for Ct2Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ct2Dtype::F32 => "f32",
            Ct2Dtype::I8 => "i8",
            Ct2Dtype::I16 => "i16",
            Ct2Dtype::I32 => "i32",
            Ct2Dtype::F16 => "f16",
            Ct2Dtype::BF16 => "bf16",
        })
    }
}

/// One stored variable: where its bytes are and what they hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ct2Variable {
    /// Element type.
    pub dtype: Ct2Dtype,
    /// Shape, outermost first (empty for a scalar).
    pub shape: Vec<usize>,
    /// Byte offset of the data from the start of the file.
    pub start: usize,
    /// Byte length of the data (`numel · dtype size`, checked).
    pub len: usize,
}

impl Ct2Variable {
    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// An open, memory-mapped CTranslate2 `model.bin`.
pub struct Ct2File {
    path: PathBuf,
    map: Arc<memmap2::Mmap>,
    binary_version: u32,
    spec: String,
    revision: u32,
    /// Variables in file order.
    order: Vec<String>,
    variables: BTreeMap<String, Ct2Variable>,
    aliases: BTreeMap<String, String>,
}

impl std::fmt::Debug for Ct2File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ct2File")
            .field("path", &self.path)
            .field("binary_version", &self.binary_version)
            .field("spec", &self.spec)
            .field("revision", &self.revision)
            .field("variables", &self.variables.len())
            .field("aliases", &self.aliases.len())
            .finish()
    }
}

/// Reads the header fields one at a time, checking each against the end of the file.
struct Cursor<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: &str, msg: impl std::fmt::Display) -> Error {
        Error::format(
            self.path,
            format!("CTranslate2 model: {what}: {msg} (at byte {})", self.pos),
        )
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(self.err(
                what,
                format!(
                    "needs {n} bytes but only {left} remain of the file's {}; the file is truncated or corrupt (fetch it again)",
                    self.bytes.len()
                ),
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A string: u16 length counting the trailing NUL, the bytes, the NUL.
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u16(what)? as usize;
        if n == 0 {
            return Err(self.err(what, "string length 0 (it must count a trailing NUL)"));
        }
        let b = self.take(n, what)?;
        let (text, nul) = b.split_at(n - 1);
        if nul != [0] {
            return Err(self.err(what, "string does not end in NUL"));
        }
        let s =
            std::str::from_utf8(text).map_err(|e| self.err(what, format!("not UTF-8 ({e})")))?;
        if s.contains('\0') {
            return Err(self.err(what, "string holds a NUL byte"));
        }
        Ok(s.to_string())
    }
}

impl Ct2File {
    /// Open `path` (a `model.bin`), memory-map it and check its whole layout.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        // SAFETY: the map is read-only; lucent never writes to model files while open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        let mut c = Cursor {
            path: &path,
            bytes: &map[..],
            pos: 0,
        };
        let binary_version = c.u32("binary version")?;
        if !BINARY_VERSIONS.contains(&binary_version) {
            return Err(c.err(
                "binary version",
                format!(
                    "{binary_version} is not one lucent reads ({}–{}); is this a CTranslate2 model.bin? Convert it again with a current CTranslate2",
                    BINARY_VERSIONS.start(),
                    BINARY_VERSIONS.end()
                ),
            ));
        }
        let spec = c.string("spec name")?;
        let revision = c.u32("spec revision")?;
        let count = c.u32("variable count")? as usize;
        let mut order = Vec::new();
        let mut variables = BTreeMap::new();
        for i in 0..count {
            let name = c.string(&format!("variable {i} of {count}: name"))?;
            let what = |field: &str| format!("variable {i} ({name}): {field}");
            let rank = c.u8(&what("rank"))? as usize;
            if rank > MAX_RANK {
                return Err(c.err(
                    &what("rank"),
                    format!("{rank} dimensions (at most {MAX_RANK})"),
                ));
            }
            let mut shape = Vec::with_capacity(rank);
            for d in 0..rank {
                shape.push(c.u32(&what(&format!("dimension {d}")))? as usize);
            }
            let code = c.u8(&what("dtype"))?;
            let dtype = Ct2Dtype::from_code(code).ok_or_else(|| {
                c.err(
                    &what("dtype"),
                    format!("unknown code {code} (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16)"),
                )
            })?;
            let len = c.u32(&what("nbytes"))? as usize;
            let want = shape
                .iter()
                .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| c.err(&what("shape"), format!("{shape:?} of {dtype} overflows")))?;
            if len != want {
                return Err(c.err(
                    &what("nbytes"),
                    format!("{len}, but shape {shape:?} of {dtype} needs {want}"),
                ));
            }
            let start = c.pos;
            c.take(len, &what("data"))?;
            if variables.contains_key(&name) {
                return Err(c.err(&what("name"), "the name appears twice"));
            }
            order.push(name.clone());
            variables.insert(
                name,
                Ct2Variable {
                    dtype,
                    shape,
                    start,
                    len,
                },
            );
        }
        let n_aliases = c.u32("alias count")? as usize;
        let mut aliases = BTreeMap::new();
        for i in 0..n_aliases {
            let alias = c.string(&format!("alias {i} of {n_aliases}: name"))?;
            let target = c.string(&format!("alias {i} ({alias}): target"))?;
            if !variables.contains_key(&target) {
                return Err(c.err(
                    &format!("alias {i} ({alias})"),
                    format!("its target '{target}' is not a variable of the file"),
                ));
            }
            if variables.contains_key(&alias) || aliases.contains_key(&alias) {
                return Err(c.err(
                    &format!("alias {i} ({alias})"),
                    "the name is already a variable or an alias",
                ));
            }
            aliases.insert(alias, target);
        }
        if c.pos != c.bytes.len() {
            let extra = c.bytes.len() - c.pos;
            return Err(c.err(
                "end of file",
                format!("{extra} bytes follow the alias table; the file is corrupt"),
            ));
        }
        Ok(Ct2File {
            path,
            map: Arc::new(map),
            binary_version,
            spec,
            revision,
            order,
            variables,
            aliases,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The binary format version (4–6).
    pub fn binary_version(&self) -> u32 {
        self.binary_version
    }

    /// The model spec's name (`WhisperSpec`, `TransformerSpec`, ...).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The spec's revision.
    pub fn revision(&self) -> u32 {
        self.revision
    }

    /// The stored variables' names, in file order (aliases not included).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    /// Number of stored variables.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the file stores no variable.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The alias table: alias → the stored variable it names.
    pub fn aliases(&self) -> &BTreeMap<String, String> {
        &self.aliases
    }

    /// `name` with an alias resolved to the variable it names.
    pub fn resolve<'n>(&'n self, name: &'n str) -> &'n str {
        self.aliases.get(name).map_or(name, String::as_str)
    }

    /// Whether `name` (a variable or an alias) is in the file.
    pub fn contains(&self, name: &str) -> bool {
        self.variables.contains_key(self.resolve(name))
    }

    /// The variable `name` (aliases resolved), or an error naming the file.
    pub fn get(&self, name: &str) -> Result<&Ct2Variable> {
        self.variables.get(self.resolve(name)).ok_or_else(|| {
            let prefix = name.rsplit_once('/').map_or("", |(p, _)| p);
            let near: Vec<&str> = self
                .order
                .iter()
                .filter(|n| !prefix.is_empty() && n.starts_with(prefix))
                .take(6)
                .map(String::as_str)
                .collect();
            let hint = if near.is_empty() {
                String::new()
            } else {
                format!("; variables under {prefix}/: {}", near.join(", "))
            };
            Error::Weights(format!(
                "{}: no variable '{name}' ({} spec, {} variables){hint}",
                self.path.display(),
                self.spec,
                self.order.len()
            ))
        })
    }

    /// The raw little-endian bytes of `name`.
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        let v = self.get(name)?;
        Ok(&self.map[v.start..v.start + v.len])
    }

    /// `name` as an f32 tensor: f32 data stays in the map when it is aligned (copied
    /// otherwise), f16 and bf16 widen to f32. Integer variables are an error: read them
    /// with [`Ct2File::scalar_int`] or [`Ct2File::dequantized`].
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let v = self.get(name)?;
        let shape = if v.shape.is_empty() {
            vec![1]
        } else {
            v.shape.clone()
        };
        match v.dtype {
            Ct2Dtype::F32 => Tensor::from_mmap_f32(self.map.clone(), v.start, &shape),
            Ct2Dtype::F16 | Ct2Dtype::BF16 => {
                let dtype = v.dtype.float().unwrap_or(Dtype::F32);
                Tensor::from_bytes(&self.map[v.start..v.start + v.len], dtype, &shape)
            }
            other => Err(Error::Weights(format!(
                "{}: variable '{name}' holds {other} integers, not floats; a quantised weight is read with dequantized(), a flag with scalar_int()",
                self.path.display()
            ))),
        }
    }

    /// The integer value of a one-element integer variable (a flag or a count:
    /// `decoder/num_heads`, `decoder/pre_norm`, ...).
    pub fn scalar_int(&self, name: &str) -> Result<i64> {
        let v = self.get(name)?;
        if v.numel() != 1 {
            return Err(Error::Weights(format!(
                "{}: variable '{name}' has shape {:?}, not a single value",
                self.path.display(),
                v.shape
            )));
        }
        let b = &self.map[v.start..v.start + v.len];
        Ok(match v.dtype {
            Ct2Dtype::I8 => i64::from(b[0] as i8),
            Ct2Dtype::I16 => i64::from(i16::from_le_bytes([b[0], b[1]])),
            Ct2Dtype::I32 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            other => {
                return Err(Error::Weights(format!(
                    "{}: variable '{name}' is {other}, not an integer",
                    self.path.display()
                )))
            }
        })
    }

    /// A float weight as f32, or an int8 / int16 quantised weight multiplied back by its
    /// scale: CTranslate2 stores `q = round(w · scale)` with one scale per output row in
    /// `NAME_scale` (shape `(rows)`, or one value for the whole matrix), so
    /// `w = q / scale`.
    ///
    /// # Shapes
    /// `name`: `(rows, ...)`; `NAME_scale`: `(rows)` or `()`; result: `name`'s shape.
    pub fn dequantized(&self, name: &str) -> Result<Tensor> {
        let v = self.get(name)?;
        if v.dtype.float().is_some() {
            return self.tensor(name);
        }
        if !matches!(v.dtype, Ct2Dtype::I8 | Ct2Dtype::I16) {
            return Err(Error::Weights(format!(
                "{}: variable '{name}' is {}, which CTranslate2 does not use for quantised weights",
                self.path.display(),
                v.dtype
            )));
        }
        let scale_name = format!("{}_scale", self.resolve(name));
        let scale = self.tensor(&scale_name)?;
        let rows = v.shape.first().copied().unwrap_or(1);
        let per_row = v.numel().checked_div(rows).unwrap_or(0).max(1);
        let scales = scale.data();
        if scales.len() != rows && scales.len() != 1 {
            return Err(Error::Weights(format!(
                "{}: '{scale_name}' has {} values, but '{name}' has {rows} rows",
                self.path.display(),
                scales.len()
            )));
        }
        let b = &self.map[v.start..v.start + v.len];
        let q = |i: usize| -> f32 {
            match v.dtype {
                Ct2Dtype::I8 => f32::from(b[i] as i8),
                _ => f32::from(i16::from_le_bytes([b[2 * i], b[2 * i + 1]])),
            }
        };
        let data: Vec<f32> = (0..v.numel())
            .map(|i| {
                let s = if scales.len() == 1 {
                    scales[0]
                } else {
                    scales[i / per_row]
                };
                q(i) / s
            })
            .collect();
        let shape = if v.shape.is_empty() {
            vec![1]
        } else {
            v.shape.clone()
        };
        Tensor::new(data, &shape)
    }
}

/// The names of the files of a CTranslate2 model folder.
pub const MODEL_FILE: &str = "model.bin";
/// The decoding settings file.
pub const CONFIG_FILE: &str = "config.json";
/// The Hugging Face tokenizer file.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Whisper's `config.json` in a CTranslate2 folder (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct WhisperConfig {
    /// `[layer, head]` pairs of decoder cross-attention heads that follow the audio
    /// (for word times); empty when the converter did not write them.
    #[serde(default)]
    pub alignment_heads: Vec<(usize, usize)>,
    /// Language token ids, in vocabulary order (empty for an English-only model).
    #[serde(default)]
    pub lang_ids: Vec<u32>,
    /// Token ids never generated.
    pub suppress_ids: Vec<u32>,
    /// Token ids not allowed as the first generated token.
    pub suppress_ids_begin: Vec<u32>,
    /// Keys lucent does not know, kept so that a model builder can refuse them by name.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// An opened CTranslate2 model folder: `model.bin`, `config.json`, `tokenizer.json`.
#[derive(Debug)]
pub struct Ct2Folder {
    /// The folder.
    pub dir: PathBuf,
    /// `model.bin`.
    pub model: Ct2File,
    /// `config.json`, as JSON (its schema depends on the spec).
    pub config: serde_json::Value,
    /// `tokenizer.json`.
    pub tokenizer: HfTokenizer,
}

impl Ct2Folder {
    /// Whether `dir` looks like a CTranslate2 folder (it holds a `model.bin`).
    pub fn is_ct2_folder(dir: &Path) -> bool {
        dir.join(MODEL_FILE).is_file()
    }

    /// Open the folder `dir`; each missing or unreadable file is an error naming it.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::Argument(format!(
                "{}: not a folder; a CTranslate2 model is a folder holding {MODEL_FILE}, {CONFIG_FILE} and {TOKENIZER_FILE}",
                dir.display()
            )));
        }
        for f in [MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE] {
            if !dir.join(f).is_file() {
                return Err(Error::Argument(format!(
                    "{}: the CTranslate2 model folder has no {f} (it needs {MODEL_FILE}, {CONFIG_FILE} and {TOKENIZER_FILE})",
                    dir.display()
                )));
            }
        }
        let model = Ct2File::open(dir.join(MODEL_FILE))?;
        let cpath = dir.join(CONFIG_FILE);
        let text = std::fs::read(&cpath).map_err(|e| Error::io(&cpath, e))?;
        let config: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| Error::format(&cpath, format!("not valid JSON: {e}")))?;
        if !config.is_object() {
            return Err(Error::format(&cpath, "expected a JSON object"));
        }
        let tokenizer = HfTokenizer::from_file(dir.join(TOKENIZER_FILE))?;
        Ok(Ct2Folder {
            dir,
            model,
            config,
            tokenizer,
        })
    }

    /// `config.json` read as Whisper's, checked: the model must be a `WhisperSpec`, every
    /// token id must be in the model's vocabulary (`decoder/embeddings/weight`'s rows) and
    /// every alignment head in the decoder (`decoder/layer_{l}`, `decoder/num_heads`).
    pub fn whisper_config(&self) -> Result<WhisperConfig> {
        let cpath = self.dir.join(CONFIG_FILE);
        if self.model.spec() != "WhisperSpec" {
            return Err(Error::format(
                self.model.path(),
                format!(
                    "spec is '{}', not a Whisper model (WhisperSpec)",
                    self.model.spec()
                ),
            ));
        }
        let cfg: WhisperConfig = serde_json::from_value(self.config.clone())
            .map_err(|e| Error::format(&cpath, format!("not a Whisper config: {e}")))?;
        let vocab = self
            .model
            .get("decoder/embeddings/weight")?
            .shape
            .first()
            .copied()
            .unwrap_or(0);
        for (key, ids) in [
            ("lang_ids", &cfg.lang_ids),
            ("suppress_ids", &cfg.suppress_ids),
            ("suppress_ids_begin", &cfg.suppress_ids_begin),
        ] {
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(Error::format(
                    &cpath,
                    format!("{key}: id {bad} is outside the vocabulary of {vocab} tokens"),
                ));
            }
        }
        let heads = self.model.scalar_int("decoder/num_heads")?;
        for &(layer, head) in &cfg.alignment_heads {
            let prefix = format!("decoder/layer_{layer}/");
            let has_layer = self.model.names().any(|n| n.starts_with(&prefix));
            if !has_layer || head as i64 >= heads {
                return Err(Error::format(
                    &cpath,
                    format!(
                        "alignment_heads: [{layer}, {head}] is not a decoder layer and head of the model ({heads} heads)"
                    ),
                ));
            }
        }
        Ok(cfg)
    }
}

/// Writes the `model.bin` layout (binary version 6), for tests and crafted files (fuzz
/// seeds): variables in the order given, then the aliases. Shapes are `usize` here and
/// stored as `u32`; a name is stored as given (its length, counting the NUL, must fit
/// a `u16`, which [`Ct2Writer::to_bytes`] checks).
#[derive(Clone, Debug, Default)]
pub struct Ct2Writer {
    spec: String,
    revision: u32,
    variables: Vec<(String, Vec<usize>, Ct2Dtype, Vec<u8>)>,
    aliases: Vec<(String, String)>,
}

impl Ct2Writer {
    /// An empty file of model spec `spec` (e.g. `WhisperSpec`) at `revision`.
    pub fn new(spec: &str, revision: u32) -> Self {
        Ct2Writer {
            spec: spec.into(),
            revision,
            ..Ct2Writer::default()
        }
    }

    /// Add a variable: its raw little-endian `bytes` of `dtype`.
    pub fn variable(&mut self, name: &str, shape: &[usize], dtype: Ct2Dtype, bytes: Vec<u8>) {
        self.variables
            .push((name.into(), shape.to_vec(), dtype, bytes));
    }

    /// Add an f32 variable widened or narrowed to `dtype` (f32, f16 or bf16).
    pub fn floats(&mut self, name: &str, shape: &[usize], dtype: Ct2Dtype, values: &[f32]) {
        let bytes: Vec<u8> = match dtype {
            Ct2Dtype::F16 => values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
            Ct2Dtype::BF16 => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
            _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        self.variable(name, shape, dtype, bytes);
    }

    /// Add a scalar integer variable of `dtype` (i8, i16 or i32).
    pub fn scalar(&mut self, name: &str, dtype: Ct2Dtype, value: i32) {
        let bytes = match dtype {
            Ct2Dtype::I8 => vec![value as i8 as u8],
            Ct2Dtype::I16 => (value as i16).to_le_bytes().to_vec(),
            _ => value.to_le_bytes().to_vec(),
        };
        self.variable(name, &[], dtype, bytes);
    }

    /// Add an alias: `alias` reads as `target`.
    pub fn alias(&mut self, alias: &str, target: &str) {
        self.aliases.push((alias.into(), target.into()));
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        fn string(out: &mut Vec<u8>, s: &str) -> Result<()> {
            let n = u16::try_from(s.len() + 1).map_err(|_| {
                Error::Argument(format!(
                    "a name of {} bytes does not fit model.bin",
                    s.len()
                ))
            })?;
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(s.as_bytes());
            out.push(0);
            Ok(())
        }
        let u32_of = |n: usize, what: &str| {
            u32::try_from(n).map_err(|_| Error::Argument(format!("{what} {n} does not fit a u32")))
        };
        let mut out = Vec::new();
        out.extend_from_slice(&6u32.to_le_bytes());
        string(&mut out, &self.spec)?;
        out.extend_from_slice(&self.revision.to_le_bytes());
        out.extend_from_slice(&u32_of(self.variables.len(), "variable count")?.to_le_bytes());
        for (name, shape, dtype, bytes) in &self.variables {
            string(&mut out, name)?;
            if shape.len() > MAX_RANK {
                return Err(Error::Argument(format!(
                    "{name}: rank {} is over {MAX_RANK}",
                    shape.len()
                )));
            }
            out.push(shape.len() as u8);
            for &d in shape {
                out.extend_from_slice(&u32_of(d, "dimension")?.to_le_bytes());
            }
            out.push(dtype.code());
            out.extend_from_slice(&u32_of(bytes.len(), "byte count")?.to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out.extend_from_slice(&u32_of(self.aliases.len(), "alias count")?.to_le_bytes());
        for (a, t) in &self.aliases {
            string(&mut out, a)?;
            string(&mut out, t)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_round_trip() {
        for code in 0..6 {
            let d = Ct2Dtype::from_code(code).unwrap();
            assert_eq!(d.code(), code);
        }
        assert_eq!(Ct2Dtype::from_code(6), None);
        assert_eq!(Ct2Dtype::F16.size(), 2);
        assert_eq!(Ct2Dtype::I32.size(), 4);
    }
}
