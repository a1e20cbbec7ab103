//! Checkpoints: one safetensors file holding the weights, the AdamW state (`adamw.m.*`,
//! `adamw.v.*`) and, in its metadata, the step, the run's configuration and the data
//! RNG's state (the seed; each step's batch comes from a generator seeded with
//! (seed, step), so the step number is the whole RNG state). Written to a temporary
//! file and renamed into place, so a crash never leaves half a checkpoint.

use std::collections::HashMap;
use std::path::Path;

use crate::io::safetensors::SafetensorsFile;
use crate::tensor::Tensor;
use crate::{Error, Result};

/// Write `tensors` and `metadata` as a safetensors file at `path`, atomically.
pub fn save(
    path: &Path,
    tensors: &[(String, Tensor)],
    metadata: HashMap<String, String>,
) -> Result<()> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, t)| t.data().iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, t), b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, t.shape().to_vec(), b)
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::format(path, format!("tensor {name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let data = safetensors::serialize(views, Some(metadata))
        .map_err(|e| Error::format(path, e.to_string()))?;
    let tmp = path.with_extension("safetensors.partial");
    std::fs::write(&tmp, data).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// A checkpoint read back: every tensor (owned copies) and the metadata.
pub struct Loaded {
    /// (name, tensor) of everything in the file.
    pub tensors: Vec<(String, Tensor)>,
    /// The file's metadata.
    pub metadata: HashMap<String, String>,
}

impl Loaded {
    /// A metadata value, or an error naming the file and key.
    pub fn meta(&self, key: &str, path: &Path) -> Result<&str> {
        self.metadata.get(key).map(String::as_str).ok_or_else(|| {
            Error::format(
                path,
                format!("not a lucent training checkpoint: metadata has no '{key}'"),
            )
        })
    }

    /// The tensor `name`, or an error naming the file.
    pub fn tensor(&self, name: &str, path: &Path) -> Result<&Tensor> {
        self.tensors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| Error::format(path, format!("checkpoint has no tensor '{name}'")))
    }
}

/// Read a checkpoint written by [`save`]; errors name the file and say what is wrong.
pub fn load(path: &Path) -> Result<Loaded> {
    if !path.is_file() {
        return Err(Error::Argument(format!(
            "no checkpoint at {} (a training run writes model.safetensors into its --out folder)",
            path.display()
        )));
    }
    let f = SafetensorsFile::open(path)
        .map_err(|e| Error::format(path, format!("unreadable checkpoint: {e}")))?;
    let mut names: Vec<String> = f.names().map(String::from).collect();
    names.sort();
    let tensors = names
        .into_iter()
        .map(|n| {
            let t = f.tensor(&n)?;
            let owned = Tensor::new(t.data().to_vec(), t.shape())?;
            Ok((n, owned))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Loaded {
        tensors,
        metadata: f.metadata().clone(),
    })
}
