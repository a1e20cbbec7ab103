//! Reading `.safetensors` files: a JSON header naming each tensor's dtype, shape and
//! byte range, then the raw little-endian data. The file is memory-mapped; f32 tensors
//! are used in place, f16/bf16 widen to f32 when read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::tensor::{Dtype, Tensor};
use crate::{Error, Result};

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
        // SAFETY: the map is read-only; lucent never writes to model files while open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
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
            entries.insert(
                name.clone(),
                TensorEntry {
                    dtype,
                    shape: info.shape.clone(),
                    start: data_start + b,
                    len: e - b,
                },
            );
        }
        let metadata = meta.metadata().clone().unwrap_or_default();
        Ok(SafetensorsFile {
            path,
            map: Arc::new(map),
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
