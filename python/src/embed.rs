//! `Embedder`: sentence embeddings from an encoder ([`lucent::Embedder`]), as one
//! (n, d) float32 numpy array whose buffer lucent filled (moved, not copied).

use std::sync::Arc;

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2};
use pyo3::prelude::*;

use crate::{OrPy, Threads};

/// A sentence-embedding model (an encoder with its pooling and normalisation), loaded
/// once; `embed` releases the GIL, so threads embed in parallel.
#[pyclass(module = "lucent._lucent", frozen)]
pub struct Embedder {
    inner: Arc<lucent::Embedder>,
    threads: Threads,
}

#[pymethods]
impl Embedder {
    /// Open an encoder by name (`minilm`, fetched into the cache on first use) or by a
    /// folder in Hugging Face / sentence-transformers layout. `n_threads`: a runtime
    /// of that many kernel threads for this model alone (None: lucent's default).
    /// `precision`: how its products are computed (`exact`, `bf16` or `int8`;
    /// [`lucent::Precision`]).
    #[new]
    #[pyo3(signature = (name_or_path, n_threads = None, precision = None))]
    fn new(
        py: Python<'_>,
        name_or_path: String,
        n_threads: Option<usize>,
        precision: Option<String>,
    ) -> PyResult<Self> {
        let threads = Threads::new(n_threads)?;
        let precision: lucent::Precision =
            precision.as_deref().unwrap_or("exact").parse().or_py()?;
        let inner = py.detach(|| -> lucent::Result<_> {
            let model = lucent::OpenOptions::new()
                .precision(precision)
                .open(&name_or_path)?;
            model.embedder()
        });
        Ok(Embedder {
            inner: inner.or_py()?,
            threads,
        })
    }

    /// The kernel threads this model's calls use.
    #[getter]
    fn n_threads(&self) -> usize {
        self.threads.count()
    }

    /// The model's name.
    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// How its products are computed: `exact`, `bf16` or `int8`.
    #[getter]
    fn precision(&self) -> &'static str {
        self.inner.precision().name()
    }

    /// Embedding width d.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Whether the model's pipeline L2-normalises its embeddings (a `Normalize` module).
    #[getter]
    fn normalize(&self) -> bool {
        self.inner.config().normalize
    }

    /// Pooling over token vectors: `mean`, `cls`, `max` or `mean_sqrt_len`.
    #[getter]
    fn pooling(&self) -> &'static str {
        self.inner.config().pooling.name()
    }

    /// Longest input in tokens (special tokens included); longer inputs are truncated.
    #[getter]
    fn max_seq_length(&self) -> usize {
        self.inner.config().max_seq_length
    }

    /// Token ids of each text as the model reads it (`[CLS] … [SEP]`, truncated).
    fn tokenize(&self, py: Python<'_>, texts: Vec<String>) -> PyResult<Vec<Vec<u32>>> {
        let inner = self.inner.clone();
        py.detach(move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            Ok(inner.encode(&refs)?.into_iter().map(|e| e.ids).collect())
        })
        .or_py()
    }

    /// Embed `texts`, `batch_size` per forward pass: an (n, d) float32 array, row i the
    /// embedding of text i (bit for bit what `lucent embed` prints, whatever the batch
    /// size). `normalize` L2-normalises each row once more (sentence-transformers'
    /// `normalize_embeddings`).
    ///
    /// # Shapes
    /// n texts → (n, d)
    #[pyo3(signature = (texts, batch_size = 32, normalize = false))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        batch_size: usize,
        normalize: bool,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let inner = self.inner.clone();
        let threads = self.threads.clone();
        let d = inner.dim();
        let n = texts.len();
        let flat = py
            .detach(move || {
                threads.run(move || -> lucent::Result<Vec<f32>> {
                    if texts.is_empty() {
                        return Ok(Vec::new());
                    }
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    let vecs = inner.embed_batched(&refs, batch_size)?;
                    let mut flat = Vec::with_capacity(n * d);
                    for mut v in vecs {
                        if normalize {
                            lucent::pipeline::embed::l2_normalize(&mut v);
                        }
                        flat.extend_from_slice(&v);
                    }
                    Ok(flat)
                })
            })
            .or_py()?;
        let array = Array2::from_shape_vec((n, d), flat).map_err(|e| {
            crate::LucentError::new_err(format!("embeddings do not form ({n}, {d}): {e}"))
        })?; // (n, d)
        Ok(array.into_pyarray(py))
    }
}
