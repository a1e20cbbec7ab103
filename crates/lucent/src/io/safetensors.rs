//! Reading `.safetensors` files: a JSON header naming each tensor's dtype, shape and
//! byte range, then the raw little-endian data. The file is memory-mapped; f32 tensors
//! are used in place, f16/bf16 widen to f32 when read.
//!
//! Layout: `header length n (u64, little-endian) | n bytes of JSON | data`. The JSON maps
//! each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets into
//! the data section) and may hold a `__metadata__` map of strings.
//!
//! **Hostile files.** Before the `safetensors` crate sees a header, [`check_header`]
//! holds it to the file: the header length must fit in the file (and in the format's
//! 100 MB), every tensor's shape must have a product that fits in memory, its byte count
//! must match its dtype, and its `data_offsets` must lie inside the data section. Each
//! refusal names the file, the tensor and the field; nothing is allocated beyond the
//! parsed header (itself bounded by the file's size).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::tensor::{Dtype, Tensor};
use crate::{Error, Result};

/// The largest JSON header the safetensors format allows (the `safetensors` crate's
/// limit, 100 MB).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor's entry in the header.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    /// Stored element type.
    pub dtype: Dtype,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Byte offset of the data from the start of the file.
    pub start: usize,
    /// Byte length of the data.
    pub len: usize,
}

/// An open, memory-mapped safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    map: Arc<memmap2::Mmap>,
    entries: BTreeMap<String, TensorEntry>,
    /// Tensors of dtypes lucent does not read (name → dtype), e.g. I64 buffers.
    unsupported: BTreeMap<String, String>,
    metadata: HashMap<String, String>,
}

impl SafetensorsFile {
    /// Open and check the header of `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < 8 {
            return Err(too_short(&path, len));
        }
        // SAFETY: the map is read-only; lucent never writes to model files while open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        Self::parse(path, Arc::new(map))
    }

    /// Read a safetensors file held in memory (copied into an anonymous map, as
    /// [`crate::io::GgufFile::from_bytes`] does; for tests, fuzzing and files built on the
    /// fly). `name` stands in for the path in error messages.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Self> {
        let path = PathBuf::from(name);
        if bytes.len() < 8 {
            return Err(too_short(&path, bytes.len() as u64));
        }
        let mut m = memmap2::MmapMut::map_anon(bytes.len()).map_err(|e| Error::io(&path, e))?;
        m.copy_from_slice(bytes);
        let map = m.make_read_only().map_err(|e| Error::io(&path, e))?;
        Self::parse(path, Arc::new(map))
    }

    fn parse(path: PathBuf, map: Arc<memmap2::Mmap>) -> Result<Self> {
        check_header(&path, &map)?;
        let (header_len, meta) =
            safetensors::SafeTensors::read_metadata(&map[..]).map_err(|e| {
                Error::format(
                    &path,
                    format!("not a valid safetensors file ({e}); re-download it"),
                )
            })?;
        let data_start = 8 + header_len;
        let mut entries = BTreeMap::new();
        let mut unsupported = BTreeMap::new();
        for (name, info) in meta.tensors() {
            let dtype = match info.dtype {
                safetensors::Dtype::F32 => Dtype::F32,
                safetensors::Dtype::F16 => Dtype::F16,
                safetensors::Dtype::BF16 => Dtype::BF16,
                other => {
                    // Integer buffers (BERT's `position_ids`) are not weights:
                    // listed, and an error only if someone reads them.
                    unsupported.insert(name.clone(), format!("{other:?}"));
                    continue;
                }
            };
            let (b, e) = info.data_offsets;
            // check_header has held every range inside the file; checked again here so
            // that a range can never index past the map.
            let (start, end) = match (data_start.checked_add(b), data_start.checked_add(e)) {
                (Some(s), Some(t)) if s <= t && t <= map.len() => (s, t),
                _ => {
                    return Err(Error::format(
                        &path,
                        format!("tensor '{name}': data_offsets [{b}, {e}] run past the end of the file ({} bytes)", map.len()),
                    ))
                }
            };
            entries.insert(
                name.clone(),
                TensorEntry {
                    dtype,
                    shape: info.shape.clone(),
                    start,
                    len: end - start,
                },
            );
        }
        let metadata = meta.metadata().clone().unwrap_or_default();
        Ok(SafetensorsFile {
            path,
            map,
            entries,
            unsupported,
            metadata,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(|s| s.as_str())
    }

    /// The header entry of `name`, if present.
    pub fn entry(&self, name: &str) -> Option<&TensorEntry> {
        self.entries.get(name)
    }

    /// The free-form `__metadata__` of the header.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// Tensor `name` as f32 (mapped in place when stored as aligned f32).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| match self.unsupported.get(name) {
                Some(dtype) => Error::format(
                    &self.path,
                    format!("tensor '{name}' has dtype {dtype}; lucent reads f32, f16 and bf16"),
                ),
                None => {
                    Error::Weights(format!("{}: no tensor named '{name}'", self.path.display()))
                }
            })?;
        let t = match e.dtype {
            Dtype::F32 => Tensor::from_mmap_f32(self.map.clone(), e.start, &e.shape),
            d => Tensor::from_bytes(&self.map[e.start..e.start + e.len], d, &e.shape),
        };
        t.map_err(|err| Error::Weights(format!("{}: tensor '{name}': {err}", self.path.display())))
    }

    /// Tensor `name`, checked to have `shape`; the error names the key and both shapes.
    pub fn tensor_shaped(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let t = self.tensor(name)?;
        if t.shape() != shape {
            return Err(Error::Weights(format!(
                "{}: tensor '{name}' has shape {:?}, expected {shape:?}",
                self.path.display(),
                t.shape()
            )));
        }
        Ok(t)
    }

    /// A metadata value parsed as a number; the error names the key.
    pub fn meta_f64(&self, key: &str) -> Result<f64> {
        let v = self
            .metadata
            .get(key)
            .ok_or_else(|| Error::format(&self.path, format!("metadata has no key '{key}'")))?;
        v.trim().parse().map_err(|_| {
            Error::format(
                &self.path,
                format!("metadata '{key}' = '{v}' is not a number"),
            )
        })
    }
}

fn too_short(path: &Path, len: u64) -> Error {
    Error::format(
        path,
        format!("only {len} bytes: too short to be a safetensors file (the header length alone is 8 bytes)"),
    )
}

/// The fields of one header entry that [`check_header`] holds to the file.
#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// A header's tensor entries in file order (`__metadata__` skipped).
struct RawHeader(Vec<(String, RawEntry)>);

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object mapping tensor names to their entries")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<RawHeader, A::Error> {
                let mut out = Vec::new();
                while let Some(name) = m.next_key::<String>()? {
                    if name == "__metadata__" {
                        m.next_value::<HashMap<String, String>>().map_err(|e| {
                            de::Error::custom(format_args!("__metadata__ (a map of strings): {e}"))
                        })?;
                        continue;
                    }
                    let e = m
                        .next_value::<RawEntry>()
                        .map_err(|e| de::Error::custom(format_args!("tensor '{name}': {e}")))?;
                    out.push((name, e));
                }
                Ok(RawHeader(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// Bytes per element of a safetensors dtype name, for the dtypes whose size is a whole
/// number of bytes (`None`: left to the `safetensors` crate's own check).
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F64" | "I64" | "U64" | "C64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        _ => return None,
    })
}

/// Hold a safetensors header to the file it sits in (module docs, "Hostile files").
/// Errors name `path`, the tensor and the field.
fn check_header(path: &Path, bytes: &[u8]) -> Result<()> {
    let fail = |msg: String| Err(Error::format(path, msg));
    let file_len = bytes.len() as u64;
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&bytes[..8]);
    let n = u64::from_le_bytes(len_bytes);
    if n > file_len - 8 {
        return fail(format!(
            "header length {n} (the first 8 bytes) runs past the end of the file ({file_len} bytes); \
             the file is truncated or not a safetensors file"
        ));
    }
    if n > MAX_HEADER_BYTES {
        return fail(format!(
            "header length {n} is larger than the {MAX_HEADER_BYTES} bytes the safetensors format allows"
        ));
    }
    let data_len = file_len - 8 - n;
    let json = &bytes[8..8 + n as usize];
    let header: RawHeader = serde_json::from_slice(json).map_err(|e| {
        Error::format(
            path,
            format!("not a valid safetensors file: its JSON header does not parse ({e}); the file is corrupt (re-download it)"),
        )
    })?;
    for (name, e) in &header.0 {
        let [begin, end] = e.data_offsets;
        let Some(numel) = e.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)) else {
            return fail(format!(
                "tensor '{name}': shape {:?} has more elements than fit in memory (its dimensions' product overflows)",
                e.shape
            ));
        };
        if end < begin {
            return fail(format!(
                "tensor '{name}': data_offsets [{begin}, {end}] end before they begin"
            ));
        }
        if end > data_len {
            return fail(format!(
                "tensor '{name}': data_offsets [{begin}, {end}] run past the end of the data ({data_len} bytes \
                 after the header; the file is {file_len} bytes); the file is truncated (re-download it)"
            ));
        }
        if let Some(size) = dtype_bytes(&e.dtype) {
            match numel.checked_mul(size) {
                Some(need) if need == end - begin => {}
                need => {
                    return fail(format!(
                        "tensor '{name}': shape {:?} of {} needs {} bytes, but data_offsets [{begin}, {end}] hold {}",
                        e.shape,
                        e.dtype,
                        need.map_or("more than 2^64".to_string(), |b| b.to_string()),
                        end - begin
                    ))
                }
            }
        }
    }
    Ok(())
}
