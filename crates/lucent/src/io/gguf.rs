//! Reading (and, for tests and checkpoints, writing) GGUF files: llama.cpp's single-file
//! model format.
//!
//! Layout (all little-endian; versions 2 and 3; see ggml's `docs/gguf.md`):
//!
//! ```text
//! "GGUF" | version u32 | n_tensors u64 | n_kv u64
//! n_kv × (key string | value type u32 | value)          string = len u64 + UTF-8 bytes
//! n_tensors × (name string | n_dims u32 | ne[0..n_dims] u64 | ggml type u32 | offset u64)
//! padding to `general.alignment` (default 32)
//! tensor data: each tensor at data_start + offset (offset a multiple of the alignment)
//! ```
//!
//! Value types: u8, i8, u16, i16, u32, i32, f32, bool, string, array (element type u32 +
//! length u64 + elements; arrays may nest), u64, i64, f64.
//!
//! **Shapes.** GGUF lists a tensor's dimensions innermost first: `ne[0]` is the length of
//! a row (the contiguous one). lucent writes shapes outermost first, as PyTorch and numpy
//! do, so `shape = reverse(ne)`: a weight with `ne = [in, out]` is a lucent `(out, in)`
//! matrix, the same layout as a PyTorch `nn.Linear` weight. Quantised blocks run along
//! `ne[0]`, so `ne[0]` must be a multiple of the type's block length.
//!
//! The file is memory-mapped; tensors are views into the map ([`GgufTensor`],
//! [`GgufFile::qmatrix`]) and never copied whole unless widened to f32 on request.
//! Every count and offset is checked against the file's size before it is used, so a
//! truncated or corrupt file gives an error that names the key or tensor, not a panic or
//! a huge allocation: a count must fit in the bytes that follow it, arrays nest at most
//! 8 deep, a file holds at most [`MAX_METADATA_PAIRS`] metadata pairs, dimensions'
//! products may not overflow, and each tensor's data must lie inside the file and not
//! overlap another's (so the tensors' total size is at most the file's).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::io::resident::{copy_held, Hold};
use crate::ops::quant::QMatrix;
use crate::tensor::quant::{ggml_type_name, GgmlType, QBytes};
use crate::tensor::Tensor;
use crate::{Error, Result};

/// The 4 magic bytes at the start of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Tensor data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// The most dimensions a ggml tensor has.
pub const MAX_DIMS: usize = 4;
/// How deep arrays of arrays may nest (real files use one level).
const MAX_ARRAY_DEPTH: usize = 8;
/// The most metadata pairs lucent reads (real files hold tens): each pair costs a few
/// times its bytes in memory, so a file of a million tiny pairs is refused instead.
pub const MAX_METADATA_PAIRS: usize = 1 << 16;

/// The type tag of a metadata value, with GGUF's numeric codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgufValueType {
    /// u8 (0)
    U8,
    /// i8 (1)
    I8,
    /// u16 (2)
    U16,
    /// i16 (3)
    I16,
    /// u32 (4)
    U32,
    /// i32 (5)
    I32,
    /// f32 (6)
    F32,
    /// bool, one byte (7)
    Bool,
    /// string (8)
    String,
    /// array (9)
    Array,
    /// u64 (10)
    U64,
    /// i64 (11)
    I64,
    /// f64 (12)
    F64,
}

impl GgufValueType {
    /// The type with GGUF code `c`.
    pub fn from_code(c: u32) -> Option<GgufValueType> {
        use GgufValueType::*;
        Some(match c {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// GGUF's numeric code.
    pub fn code(self) -> u32 {
        use GgufValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// The fewest bytes one value of this type takes (used to bound array lengths).
    fn min_size(self) -> usize {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f32
    F32(f32),
    /// f64
    F64(f64),
    /// bool
    Bool(bool),
    /// UTF-8 string (invalid bytes are replaced by U+FFFD)
    String(String),
    /// A typed array.
    Array(GgufArray),
}

/// A metadata array: all elements of one type. Arrays of arrays nest.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufArray {
    /// u8 elements
    U8(Vec<u8>),
    /// i8 elements
    I8(Vec<i8>),
    /// u16 elements
    U16(Vec<u16>),
    /// i16 elements
    I16(Vec<i16>),
    /// u32 elements
    U32(Vec<u32>),
    /// i32 elements
    I32(Vec<i32>),
    /// u64 elements
    U64(Vec<u64>),
    /// i64 elements
    I64(Vec<i64>),
    /// f32 elements
    F32(Vec<f32>),
    /// f64 elements
    F64(Vec<f64>),
    /// bool elements
    Bool(Vec<bool>),
    /// string elements
    String(Vec<String>),
    /// array elements
    Array(Vec<GgufArray>),
}

impl GgufArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::F64(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::String(v) => v.len(),
            GgufArray::Array(v) => v.len(),
        }
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
    pub fn elem_type(&self) -> GgufValueType {
        use GgufValueType as T;
        match self {
            GgufArray::U8(_) => T::U8,
            GgufArray::I8(_) => T::I8,
            GgufArray::U16(_) => T::U16,
            GgufArray::I16(_) => T::I16,
            GgufArray::U32(_) => T::U32,
            GgufArray::I32(_) => T::I32,
            GgufArray::U64(_) => T::U64,
            GgufArray::I64(_) => T::I64,
            GgufArray::F32(_) => T::F32,
            GgufArray::F64(_) => T::F64,
            GgufArray::Bool(_) => T::Bool,
            GgufArray::String(_) => T::String,
            GgufArray::Array(_) => T::Array,
        }
    }

    /// The elements as i64 if they are integers (any width), else `None`.
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        Some(match self {
            GgufArray::U8(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::I8(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::U16(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::I16(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::U32(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::I32(v) => v.iter().map(|&x| x as i64).collect(),
            GgufArray::U64(v) => v
                .iter()
                .map(|&x| i64::try_from(x).ok())
                .collect::<Option<Vec<_>>>()?,
            GgufArray::I64(v) => v.clone(),
            _ => return None,
        })
    }
}

impl GgufValue {
    /// The value's type.
    pub fn value_type(&self) -> GgufValueType {
        use GgufValueType as T;
        match self {
            GgufValue::U8(_) => T::U8,
            GgufValue::I8(_) => T::I8,
            GgufValue::U16(_) => T::U16,
            GgufValue::I16(_) => T::I16,
            GgufValue::U32(_) => T::U32,
            GgufValue::I32(_) => T::I32,
            GgufValue::U64(_) => T::U64,
            GgufValue::I64(_) => T::I64,
            GgufValue::F32(_) => T::F32,
            GgufValue::F64(_) => T::F64,
            GgufValue::Bool(_) => T::Bool,
            GgufValue::String(_) => T::String,
            GgufValue::Array(_) => T::Array,
        }
    }

    /// The value as i128 if it is an integer of any width.
    fn as_int(&self) -> Option<i128> {
        Some(match *self {
            GgufValue::U8(v) => v as i128,
            GgufValue::I8(v) => v as i128,
            GgufValue::U16(v) => v as i128,
            GgufValue::I16(v) => v as i128,
            GgufValue::U32(v) => v as i128,
            GgufValue::I32(v) => v as i128,
            GgufValue::U64(v) => v as i128,
            GgufValue::I64(v) => v as i128,
            _ => return None,
        })
    }

    /// A short description for error messages (`u32 7`, `string "llama"`, `array of 3 f32`).
    pub fn describe(&self) -> String {
        match self {
            GgufValue::String(s) if s.len() > 40 => format!("a string of {} bytes", s.len()),
            GgufValue::String(s) => format!("string {s:?}"),
            GgufValue::Array(a) => format!("an array of {} {:?}", a.len(), a.elem_type()),
            v => format!("{:?}", v),
        }
    }
}

/// One entry of the tensor table.
#[derive(Clone, Debug)]
pub struct GgufTensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Dimensions as GGUF stores them, innermost first (`ne[0]` = row length).
    pub dims: Vec<u64>,
    /// Dimensions outermost first (lucent / PyTorch order): `reverse(dims)`.
    pub shape: Vec<usize>,
    /// Storage type.
    pub dtype: GgmlType,
    /// Offset from the start of the data section, as stored.
    pub offset: u64,
    /// Absolute byte offset of the data in the file.
    pub start: usize,
    /// Byte length of the data.
    pub len: usize,
}

impl GgufTensorInfo {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Row length: `ne[0]` (1 for a scalar).
    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Number of rows: the product of all dimensions but the innermost.
    pub fn rows(&self) -> usize {
        self.numel() / self.cols().max(1)
    }
}

/// A view of one tensor: its table entry and its bytes inside the mapped file.
#[derive(Clone, Copy, Debug)]
pub struct GgufTensor<'a> {
    /// The table entry (name, dims, shape, dtype).
    pub info: &'a GgufTensorInfo,
    /// The tensor's bytes (whole blocks of `info.dtype`, row after row).
    pub data: &'a [u8],
}

impl GgufTensor<'_> {
    /// The name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Storage type.
    pub fn dtype(&self) -> GgmlType {
        self.info.dtype
    }

    /// Shape, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.info.shape
    }

    /// All elements widened to f32 (row-major in `shape`).
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        let mut out = vec![0.0f32; self.info.numel()];
        crate::ops::quant::dequantize(self.info.dtype, self.data, &mut out)
            .map_err(|e| Error::Weights(format!("tensor '{}': {e}", self.info.name)))?;
        Ok(out)
    }
}

/// An open GGUF file: its metadata, its tensor table, and views of its tensors, over
/// its bytes mapped from the file or held in memory ([`GgufFile::into_held`]).
pub struct GgufFile {
    path: PathBuf,
    map: Arc<memmap2::Mmap>,
    version: u32,
    alignment: usize,
    data_start: usize,
    metadata: Vec<(String, GgufValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GgufFile({}, v{}, {} keys, {} tensors)",
            self.path.display(),
            self.version,
            self.metadata.len(),
            self.tensors.len()
        )
    }
}

/// A bounds-checked little-endian reader over the header.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn err(&self, msg: impl Into<String>) -> Error {
        Error::format(self.path, msg)
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format!(
                "truncated: {what} needs {n} bytes at offset {}, but the file ends at {}; \
                 the file is incomplete (re-download it)",
                self.pos,
                self.bytes.len()
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }

    /// A length-prefixed string's bytes.
    fn str_bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let at = self.pos;
        let n = self.u64(what)?;
        if n > self.remaining() as u64 {
            return Err(self.err(format!(
                "{what}: string length {n} at offset {at} runs past the end of the file ({} bytes); \
                 the file is corrupt or truncated",
                self.bytes.len()
            )));
        }
        self.take(n as usize, what)
    }

    /// A string that must be valid UTF-8 (keys, tensor names).
    fn strict_string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let b = self.str_bytes(what)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| self.err(format!("{what} at offset {at} is not valid UTF-8")))
    }

    /// A count of items that each take at least `min` bytes; errors if they cannot fit.
    fn count(&mut self, min: usize, what: &str) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let fits = (self.remaining() / min.max(1)) as u64;
        if n > fits {
            return Err(self.err(format!(
                "{what} = {n} at offset {at}, but only {} bytes follow (at most {fits} could fit); \
                 the file is corrupt or truncated",
                self.remaining()
            )));
        }
        Ok(n as usize)
    }

    fn value_type(&mut self, key: &str) -> Result<GgufValueType> {
        let at = self.pos;
        let c = self.u32(key)?;
        GgufValueType::from_code(c).ok_or_else(|| {
            self.err(format!(
                "metadata '{key}': unknown value type {c} at offset {at}"
            ))
        })
    }

    fn value(&mut self, t: GgufValueType, key: &str, depth: usize) -> Result<GgufValue> {
        use GgufValueType as T;
        Ok(match t {
            T::U8 => GgufValue::U8(self.arr::<1>(key)?[0]),
            T::I8 => GgufValue::I8(self.arr::<1>(key)?[0] as i8),
            T::U16 => GgufValue::U16(u16::from_le_bytes(self.arr(key)?)),
            T::I16 => GgufValue::I16(i16::from_le_bytes(self.arr(key)?)),
            T::U32 => GgufValue::U32(self.u32(key)?),
            T::I32 => GgufValue::I32(i32::from_le_bytes(self.arr(key)?)),
            T::U64 => GgufValue::U64(self.u64(key)?),
            T::I64 => GgufValue::I64(i64::from_le_bytes(self.arr(key)?)),
            T::F32 => GgufValue::F32(f32::from_le_bytes(self.arr(key)?)),
            T::F64 => GgufValue::F64(f64::from_le_bytes(self.arr(key)?)),
            T::Bool => {
                let b = self.arr::<1>(key)?[0];
                if b > 1 {
                    return Err(self.err(format!(
                        "metadata '{key}': bool byte is {b}, expected 0 or 1"
                    )));
                }
                GgufValue::Bool(b == 1)
            }
            T::String => {
                GgufValue::String(String::from_utf8_lossy(self.str_bytes(key)?).into_owned())
            }
            T::Array => GgufValue::Array(self.array(key, depth)?),
        })
    }

    fn array(&mut self, key: &str, depth: usize) -> Result<GgufArray> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.err(format!(
                "metadata '{key}': arrays nest deeper than {MAX_ARRAY_DEPTH}"
            )));
        }
        let et = self.value_type(key)?;
        let n = self.count(et.min_size(), &format!("length of array '{key}'"))?;
        macro_rules! fixed {
            ($variant:ident, $ty:ty) => {{
                let raw = self.take(n * std::mem::size_of::<$ty>(), key)?;
                GgufArray::$variant(
                    raw.chunks_exact(std::mem::size_of::<$ty>())
                        .map(|c| <$ty>::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect(),
                )
            }};
        }
        use GgufValueType as T;
        Ok(match et {
            T::U8 => GgufArray::U8(self.take(n, key)?.to_vec()),
            T::I8 => GgufArray::I8(self.take(n, key)?.iter().map(|&b| b as i8).collect()),
            T::U16 => fixed!(U16, u16),
            T::I16 => fixed!(I16, i16),
            T::U32 => fixed!(U32, u32),
            T::I32 => fixed!(I32, i32),
            T::U64 => fixed!(U64, u64),
            T::I64 => fixed!(I64, i64),
            T::F32 => fixed!(F32, f32),
            T::F64 => fixed!(F64, f64),
            T::Bool => {
                let raw = self.take(n, key)?;
                if let Some(b) = raw.iter().find(|&&b| b > 1) {
                    return Err(self.err(format!(
                        "metadata '{key}': bool byte is {b}, expected 0 or 1"
                    )));
                }
                GgufArray::Bool(raw.iter().map(|&b| b == 1).collect())
            }
            T::String => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(String::from_utf8_lossy(self.str_bytes(key)?).into_owned());
                }
                GgufArray::String(v)
            }
            T::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array(key, depth + 1)?);
                }
                GgufArray::Array(v)
            }
        })
    }
}

impl GgufFile {
    /// Open, map and check `path` (the bytes come from the file as they are read). A
    /// model to run then takes [`GgufFile::into_held`].
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < 24 {
            return Err(Error::format(
                &path,
                format!(
                    "only {len} bytes: too short to be a GGUF file (the header alone is 24 bytes)"
                ),
            ));
        }
        // SAFETY: the map is read-only; lucent never writes to model files while open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        GgufFile::parse(path, Arc::new(map))
    }

    /// This file with its bytes held to run the model it holds: copied once into memory
    /// of transparent huge pages where that fits, else left mapped
    /// ([`crate::io::resident`]: decode reads every weight each token, and over huge
    /// pages it streams). Take it after the checks that may refuse the file, so that a
    /// refusal does not wait for the copy.
    pub fn into_held(self) -> Result<GgufFile> {
        let hold = Hold::for_len(self.map.len() as u64);
        if hold == Hold::Mapped {
            return Ok(self);
        }
        let map = copy_held(&self.map, &self.path)?;
        Ok(GgufFile {
            map: Arc::new(map),
            ..self
        })
    }

    /// Read a GGUF file held in memory (copied into an anonymous map; for tests and
    /// files built on the fly). `name` stands in for the path in error messages.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<GgufFile> {
        let path = PathBuf::from(name);
        if bytes.len() < 24 {
            return Err(Error::format(
                &path,
                format!(
                    "only {} bytes: too short to be a GGUF file (the header alone is 24 bytes)",
                    bytes.len()
                ),
            ));
        }
        let mut m = memmap2::MmapMut::map_anon(bytes.len()).map_err(|e| Error::io(&path, e))?;
        m.copy_from_slice(bytes);
        let map = m.make_read_only().map_err(|e| Error::io(&path, e))?;
        GgufFile::parse(path, Arc::new(map))
    }

    fn parse(path: PathBuf, map: Arc<memmap2::Mmap>) -> Result<GgufFile> {
        let bytes: &[u8] = &map;
        let mut r = Reader {
            bytes,
            pos: 0,
            path: &path,
        };
        let magic = r.arr::<4>("magic")?;
        if magic != GGUF_MAGIC {
            return Err(r.err(format!(
                "not a GGUF file: it starts with {magic:02x?}, not \"GGUF\"; check that the path names a .gguf model"
            )));
        }
        let version = r.u32("version")?;
        match version {
            2 | 3 => {}
            1 => return Err(r.err("GGUF version 1 is not supported (lucent reads 2 and 3); convert the file with a current llama.cpp")),
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
                return Err(r.err("this GGUF file is big-endian; lucent reads little-endian files only"))
            }
            v => return Err(r.err(format!("unknown GGUF version {v}; lucent reads versions 2 and 3"))),
        }
        // Each tensor entry takes at least 8 (name) + 4 + 4 + 8 bytes, each pair at least 8 + 4 + 1.
        let n_tensors = r.count(24, "tensor count")?;
        let n_kv = r.count(13, "metadata count")?;
        if n_kv > MAX_METADATA_PAIRS {
            return Err(r.err(format!(
                "metadata count = {n_kv}: GGUF files hold tens of metadata pairs and lucent reads at most \
                 {MAX_METADATA_PAIRS}; the file is corrupt or not a model"
            )));
        }

        let mut metadata = Vec::with_capacity(n_kv);
        let mut meta_index = HashMap::with_capacity(n_kv);
        for _ in 0..n_kv {
            let key = r.strict_string("a metadata key")?;
            let t = r.value_type(&key)?;
            let v = r.value(t, &key, 0)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(r.err(format!("metadata key '{key}' appears twice")));
            }
            metadata.push((key, v));
        }

        let alignment = match meta_index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(GgufValue::U32(a)) if a.is_power_of_two() => *a as usize,
            Some(v) => {
                return Err(r.err(format!(
                    "general.alignment is {}; it must be a u32 power of two",
                    v.describe()
                )))
            }
        };

        struct Raw {
            name: String,
            dims: Vec<u64>,
            dtype: GgmlType,
            offset: u64,
        }
        let mut raw = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = r.strict_string("a tensor name")?;
            let n_dims = r.u32(&name)? as usize;
            if n_dims > MAX_DIMS {
                return Err(r.err(format!(
                    "tensor '{name}' has {n_dims} dimensions; ggml tensors have at most {MAX_DIMS}"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                dims.push(r.u64(&name)?);
            }
            let id = r.u32(&name)?;
            let dtype = GgmlType::from_id(id).ok_or_else(|| {
                let what = match ggml_type_name(id) {
                    Some(n) => format!("type {n} (id {id}), which lucent does not read"),
                    None => format!("unknown type id {id}"),
                };
                let ok: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
                r.err(format!(
                    "tensor '{name}' has {what}; lucent reads {}; re-quantise the model to one of them",
                    ok.join(", ")
                ))
            })?;
            let offset = r.u64(&name)?;
            raw.push(Raw {
                name,
                dims,
                dtype,
                offset,
            });
        }
        let data_start = r.pos.div_ceil(alignment) * alignment;
        let file_len = bytes.len();

        let mut tensors = Vec::with_capacity(raw.len());
        let mut tensor_index = HashMap::with_capacity(raw.len());
        for t in raw {
            let Raw {
                name,
                dims,
                dtype,
                offset,
            } = t;
            let fail = |msg: String| {
                Error::format(
                    &path,
                    format!("tensor '{name}' ({dtype}, ne {dims:?}): {msg}"),
                )
            };
            if offset % alignment as u64 != 0 {
                return Err(fail(format!(
                    "data offset {offset} is not a multiple of the alignment {alignment}; the file is corrupt"
                )));
            }
            let mut shape = Vec::with_capacity(dims.len());
            for &d in dims.iter().rev() {
                shape.push(usize::try_from(d).map_err(|_| fail("dimension too large".into()))?);
            }
            let numel = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| {
                    fail("too many elements: the product of its dimensions overflows; the file is corrupt".into())
                })?;
            let cols = shape.last().copied().unwrap_or(1);
            let len = if numel == 0 {
                0
            } else {
                let rb = dtype.row_bytes(cols).map_err(|e| fail(e.to_string()))?;
                rb.checked_mul(numel / cols)
                    .ok_or_else(|| fail("too many bytes".into()))?
            };
            let start = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(data_start))
                .ok_or_else(|| {
                    fail(format!(
                        "offset {offset} is past the end of the file ({file_len} bytes)"
                    ))
                })?;
            let end = start
                .checked_add(len)
                .ok_or_else(|| fail("too many bytes".into()))?;
            if end > file_len {
                return Err(fail(format!(
                    "its data runs from byte {start} to {end}, past the end of the file ({file_len} bytes); \
                     the file is truncated (re-download it)"
                )));
            }
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return Err(Error::format(
                    &path,
                    format!("tensor '{name}' appears twice in the tensor table"),
                ));
            }
            tensors.push(GgufTensorInfo {
                name,
                dims,
                shape,
                dtype,
                offset,
                start,
                len,
            });
        }

        // Each tensor's bytes are its own (llama.cpp even asks for them in table order):
        // tensors that share bytes would let a small file stand for many large tensors.
        let mut by_start: Vec<usize> = (0..tensors.len()).filter(|&i| tensors[i].len > 0).collect();
        by_start.sort_unstable_by_key(|&i| tensors[i].start);
        for w in by_start.windows(2) {
            let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
            if b.start < a.start + a.len {
                return Err(Error::format(
                    &path,
                    format!(
                        "tensor '{}' (data bytes {}..{}) overlaps tensor '{}' (bytes {}..{}); \
                         each tensor's data must have bytes of its own; the file is corrupt",
                        b.name,
                        b.start,
                        b.start + b.len,
                        a.name,
                        a.start,
                        a.start + a.len
                    ),
                ));
            }
        }

        Ok(GgufFile {
            path,
            map,
            version,
            alignment,
            data_start,
            metadata,
            meta_index,
            tensors,
            tensor_index,
        })
    }

    // ------------------------------------------------------------ header facts

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Tensor data alignment in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Byte offset of the data section.
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// The memory map (for tensors that keep it alive).
    pub fn map(&self) -> &Arc<memmap2::Mmap> {
        &self.map
    }

    // ------------------------------------------------------------ metadata

    /// All metadata pairs, in file order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn missing(&self, key: &str) -> Error {
        let prefix = key.split('.').next().unwrap_or("");
        let near: Vec<&str> = self
            .metadata
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| k.starts_with(prefix))
            .take(12)
            .collect();
        Error::format(
            &self.path,
            format!(
                "metadata key '{key}' is missing (keys under '{prefix}': {}); is this the right model file?",
                if near.is_empty() { "none".to_string() } else { near.join(", ") }
            ),
        )
    }

    fn wrong(&self, key: &str, v: &GgufValue, want: &str) -> Error {
        Error::format(
            &self.path,
            format!("metadata key '{key}' is {}, expected {want}", v.describe()),
        )
    }

    fn need(&self, key: &str) -> Result<&GgufValue> {
        self.get(key).ok_or_else(|| self.missing(key))
    }

    fn int_in(&self, key: &str, v: &GgufValue, lo: i128, hi: i128, want: &str) -> Result<i128> {
        match v.as_int() {
            Some(i) if (lo..=hi).contains(&i) => Ok(i),
            _ => Err(self.wrong(key, v, want)),
        }
    }

    /// An unsigned integer of any stored width that fits in u32.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        let v = self.need(key)?;
        Ok(self.int_in(key, v, 0, u32::MAX as i128, "an integer in 0..2^32")? as u32)
    }

    /// An unsigned integer of any stored width that fits in u64.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.need(key)?;
        Ok(self.int_in(key, v, 0, u64::MAX as i128, "a non-negative integer")? as u64)
    }

    /// A non-negative integer as usize.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        let v = self.need(key)?;
        Ok(self.int_in(key, v, 0, usize::MAX as i128, "a non-negative integer")? as usize)
    }

    /// A signed integer of any stored width.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        let v = self.need(key)?;
        Ok(self.int_in(key, v, i64::MIN as i128, i64::MAX as i128, "an integer")? as i64)
    }

    /// A float (f32, or f64 narrowed).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        match self.need(key)? {
            GgufValue::F32(x) => Ok(*x),
            GgufValue::F64(x) => Ok(*x as f32),
            v => Err(self.wrong(key, v, "a float")),
        }
    }

    /// A bool.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.need(key)? {
            GgufValue::Bool(b) => Ok(*b),
            v => Err(self.wrong(key, v, "a bool")),
        }
    }

    /// A string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.need(key)? {
            GgufValue::String(s) => Ok(s),
            v => Err(self.wrong(key, v, "a string")),
        }
    }

    /// An array of any element type.
    pub fn get_array(&self, key: &str) -> Result<&GgufArray> {
        match self.need(key)? {
            GgufValue::Array(a) => Ok(a),
            v => Err(self.wrong(key, v, "an array")),
        }
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<&[String]> {
        match self.get_array(key)? {
            GgufArray::String(v) => Ok(v),
            a => Err(self.wrong(key, &GgufValue::Array(a.clone()), "an array of strings")),
        }
    }

    /// An array of f32 (e.g. `tokenizer.ggml.scores`).
    pub fn get_f32_array(&self, key: &str) -> Result<&[f32]> {
        match self.get_array(key)? {
            GgufArray::F32(v) => Ok(v),
            a => Err(self.wrong(key, &GgufValue::Array(a.clone()), "an array of f32")),
        }
    }

    /// An array of integers of any width, as i64 (e.g. `tokenizer.ggml.token_type`).
    pub fn get_int_array(&self, key: &str) -> Result<Vec<i64>> {
        let a = self.get_array(key)?;
        a.to_i64s()
            .ok_or_else(|| self.wrong(key, &GgufValue::Array(a.clone()), "an array of integers"))
    }

    /// Like [`GgufFile::get_u32`], but `None` when the key is absent.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        self.get(key).map(|_| self.get_u32(key)).transpose()
    }

    /// Like [`GgufFile::get_f32`], but `None` when the key is absent.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        self.get(key).map(|_| self.get_f32(key)).transpose()
    }

    /// Like [`GgufFile::get_bool`], but `None` when the key is absent.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.get(key).map(|_| self.get_bool(key)).transpose()
    }

    /// Like [`GgufFile::get_str`], but `None` when the key is absent.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        self.get(key).map(|_| self.get_str(key)).transpose()
    }

    /// `general.architecture` (`llama`, `gemma3`, ...).
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    // ------------------------------------------------------------ tensors

    /// The tensor table, in file order.
    pub fn tensor_infos(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The table entry of `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// A view of tensor `name` (no copy). Errors name the tensor and the file.
    pub fn tensor(&self, name: &str) -> Result<GgufTensor<'_>> {
        let info = self.tensor_info(name).ok_or_else(|| {
            let stem = name.rsplit_once('.').map_or(name, |(a, _)| a);
            let near: Vec<&str> = self
                .tensors
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| n.starts_with(stem.split('.').next().unwrap_or("")))
                .take(8)
                .collect();
            Error::Weights(format!(
                "{}: no tensor named '{name}' (similar: {}); the model file may be of another architecture",
                self.path.display(),
                if near.is_empty() { "none".to_string() } else { near.join(", ") }
            ))
        })?;
        Ok(GgufTensor {
            info,
            data: &self.map[info.start..info.start + info.len],
        })
    }

    /// Tensor `name` as a [`QMatrix`] of `rows × ne[0]` (rows = the product of the outer
    /// dimensions), sharing the mapped bytes.
    pub fn qmatrix(&self, name: &str) -> Result<QMatrix> {
        let t = self.tensor(name)?;
        QMatrix::new(
            t.info.dtype,
            t.info.rows(),
            t.info.cols(),
            QBytes::Mapped {
                map: self.map.clone(),
                start: t.info.start,
                len: t.info.len,
            },
        )
        .map_err(|e| Error::Weights(format!("{}: tensor '{name}': {e}", self.path.display())))
    }

    /// Tensor `name` as a [`QMatrix`], checked to have lucent shape `(rows, cols)`
    /// (`ne = [cols, rows]`); the error names the tensor and both shapes.
    pub fn qmatrix_shaped(&self, name: &str, rows: usize, cols: usize) -> Result<QMatrix> {
        self.check_shape(name, &[rows, cols])?;
        self.qmatrix(name)
    }

    /// Tensor `name`, of lucent shape `(n, rows, cols)` (`ne = [cols, rows, n]`: a stack
    /// of n matrices, such as a mixture's experts), as n [`QMatrix`]es over windows of
    /// its bytes (matrix e: rows e·rows … (e+1)·rows − 1, nothing copied); errors name
    /// the tensor and both shapes.
    pub fn qmatrix_stack_shaped(
        &self,
        name: &str,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<QMatrix>> {
        self.check_shape(name, &[n, rows, cols])?;
        let t = self.tensor(name)?;
        let bad =
            |e: Error| Error::Weights(format!("{}: tensor '{name}': {e}", self.path.display()));
        let slab = t
            .info
            .dtype
            .row_bytes(cols)
            .map_err(bad)?
            .checked_mul(rows)
            .ok_or_else(|| bad(Error::Shape(format!("{n} × {rows} × {cols} is too large"))))?;
        if slab.checked_mul(n) != Some(t.info.len) {
            return Err(bad(Error::Shape(format!(
                "{} bytes do not hold {n} matrices of {rows} × {cols} {}",
                t.info.len, t.info.dtype
            ))));
        }
        (0..n)
            .map(|e| {
                QMatrix::new(
                    t.info.dtype,
                    rows,
                    cols,
                    QBytes::Mapped {
                        map: self.map.clone(),
                        start: t.info.start + e * slab,
                        len: slab,
                    },
                )
                .map_err(bad)
            })
            .collect()
    }

    /// Rows `first .. first + rows` of tensor `name`, checked to have lucent shape
    /// `(total_rows, cols)`, as a [`QMatrix`] that views those rows of the mapped file
    /// (no copy: a row of a quantised matrix is whole blocks, so a row range is a byte
    /// range). For fused matrices (Phi-3's `attn_qkv`, `ffn_up`).
    pub fn qmatrix_rows(
        &self,
        name: &str,
        first: usize,
        rows: usize,
        total_rows: usize,
        cols: usize,
    ) -> Result<QMatrix> {
        self.check_shape(name, &[total_rows, cols])?;
        let t = self.tensor(name)?;
        if first + rows > total_rows || total_rows == 0 {
            return Err(Error::Weights(format!(
                "{}: tensor '{name}': rows {first}..{} asked of {total_rows}",
                self.path.display(),
                first + rows
            )));
        }
        let row_bytes = t.info.len / total_rows;
        QMatrix::new(
            t.info.dtype,
            rows,
            cols,
            QBytes::Mapped {
                map: self.map.clone(),
                start: t.info.start + first * row_bytes,
                len: rows * row_bytes,
            },
        )
        .map_err(|e| Error::Weights(format!("{}: tensor '{name}': {e}", self.path.display())))
    }

    /// Tensor `name` as f32, checked to have lucent `shape`; the error names the tensor
    /// and both shapes.
    pub fn tensor_f32_shaped(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.check_shape(name, shape)?;
        self.tensor_f32(name)
    }

    fn check_shape(&self, name: &str, shape: &[usize]) -> Result<()> {
        let t = self.tensor(name)?;
        if t.info.shape != shape {
            return Err(Error::Weights(format!(
                "{}: tensor '{name}' has shape {:?} (GGUF ne {:?}), expected {shape:?}; \
                 the file does not match the model configuration read from its metadata",
                self.path.display(),
                t.info.shape,
                t.info.dims
            )));
        }
        Ok(())
    }

    /// Tensor `name` widened to an f32 [`Tensor`] of its lucent shape (outermost first).
    /// F32 data is used in place (mapped); other types are dequantised (a copy).
    pub fn tensor_f32(&self, name: &str) -> Result<Tensor> {
        let t = self.tensor(name)?;
        let shape = &t.info.shape;
        let r = if t.info.dtype == GgmlType::F32 {
            Tensor::from_mmap_f32(self.map.clone(), t.info.start, shape)
        } else {
            Tensor::new(t.dequantize()?, shape)
        };
        r.map_err(|e| Error::Weights(format!("{}: tensor '{name}': {e}", self.path.display())))
    }
}

// ---------------------------------------------------------------- writer

/// Builds GGUF files (version 2 or 3) in memory: synthetic models for tests, and
/// checkpoints. Tensor shapes are given outermost first, as everywhere in lucent, and
/// stored innermost first, as GGUF wants.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    alignment: usize,
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<(String, Vec<usize>, GgmlType, Vec<u8>)>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty version-3 file with the default alignment.
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Write version `v` instead of 3 (versions 2 and 3 share the layout).
    pub fn version(mut self, v: u32) -> GgufWriter {
        self.version = v;
        self
    }

    /// Align tensor data to `a` bytes (a power of two) and record `general.alignment`.
    pub fn alignment(mut self, a: u32) -> GgufWriter {
        self.alignment = a as usize;
        self.metadata.retain(|(k, _)| k != "general.alignment");
        self.metadata
            .push(("general.alignment".into(), GgufValue::U32(a)));
        self
    }

    /// Add a metadata pair.
    pub fn add(&mut self, key: &str, value: GgufValue) -> &mut GgufWriter {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Add a tensor of lucent `shape` (outermost first) whose `bytes` are whole blocks of `dtype`.
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: GgmlType,
        bytes: Vec<u8>,
    ) -> Result<&mut GgufWriter> {
        let numel: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1);
        let need = if numel == 0 {
            0
        } else {
            dtype.row_bytes(cols)? * (numel / cols)
        };
        if bytes.len() != need {
            return Err(Error::Shape(format!(
                "GgufWriter: tensor '{name}' {shape:?} of {dtype} needs {need} bytes, got {}",
                bytes.len()
            )));
        }
        self.tensors
            .push((name.to_string(), shape.to_vec(), dtype, bytes));
        Ok(self)
    }

    /// Add an f32 tensor.
    pub fn add_f32(
        &mut self,
        name: &str,
        shape: &[usize],
        data: &[f32],
    ) -> Result<&mut GgufWriter> {
        let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, shape, GgmlType::F32, bytes)
    }

    fn put_str(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    fn put_array(out: &mut Vec<u8>, a: &GgufArray) {
        out.extend(a.elem_type().code().to_le_bytes());
        out.extend((a.len() as u64).to_le_bytes());
        match a {
            GgufArray::U8(v) => out.extend(v),
            GgufArray::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
            GgufArray::U16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::I16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::U32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::I32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::U64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::I64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::F32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::F64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            GgufArray::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
            GgufArray::String(v) => v.iter().for_each(|s| Self::put_str(out, s)),
            GgufArray::Array(v) => v.iter().for_each(|x| Self::put_array(out, x)),
        }
    }

    fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
        match v {
            GgufValue::U8(x) => out.push(*x),
            GgufValue::I8(x) => out.push(*x as u8),
            GgufValue::U16(x) => out.extend(x.to_le_bytes()),
            GgufValue::I16(x) => out.extend(x.to_le_bytes()),
            GgufValue::U32(x) => out.extend(x.to_le_bytes()),
            GgufValue::I32(x) => out.extend(x.to_le_bytes()),
            GgufValue::U64(x) => out.extend(x.to_le_bytes()),
            GgufValue::I64(x) => out.extend(x.to_le_bytes()),
            GgufValue::F32(x) => out.extend(x.to_le_bytes()),
            GgufValue::F64(x) => out.extend(x.to_le_bytes()),
            GgufValue::Bool(x) => out.push(*x as u8),
            GgufValue::String(s) => Self::put_str(out, s),
            GgufValue::Array(a) => Self::put_array(out, a),
        }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(GGUF_MAGIC);
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            Self::put_str(&mut out, k);
            out.extend(v.value_type().code().to_le_bytes());
            Self::put_value(&mut out, v);
        }
        let a = self.alignment.max(1);
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for (name, shape, dtype, bytes) in &self.tensors {
            Self::put_str(&mut out, name);
            out.extend((shape.len() as u32).to_le_bytes());
            for &d in shape.iter().rev() {
                out.extend((d as u64).to_le_bytes());
            }
            out.extend(dtype.id().to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + bytes.len()).div_ceil(a) * a;
        }
        out.resize(out.len().div_ceil(a) * a, 0);
        let data_start = out.len();
        for ((_, _, _, bytes), off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            out.extend(bytes);
        }
        out
    }

    /// Write the file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|e| Error::io(path, e))
    }
}
