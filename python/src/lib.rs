//! `lucent._lucent`: the compiled core of the Python package, a thin caller of lucent's
//! public API (ARCHITECTURE.md, principle 8).
//!
//! | Python | lucent |
//! | --- | --- |
//! | `Embedder` | [`lucent::Embedder`]: `embed(texts, batch_size)` → (n, d) float32 |
//! | `Generator`, `TokenStream` | [`lucent::Generator`] over a shared [`TextModel`]: tokenize, chat ids, `generate`, `stream` |
//! | `Model`, `Trace` | [`lucent::open`] / [`lucent::Model::trace_with`]: every intermediate as a numpy view |
//! | `params`, `shapes`, `memory`, masks, position tables, `softmax` | the guides' tools ([`tools`]) |
//! | `Transcriber` | [`lucent::pipeline::transcribe::Transcriber`]: a WAV file → the transcript as JSON (`lucent.Whisper` reshapes it) |
//! | `LucentError` | every [`lucent::Error`], with lucent's message |
//!
//! The Python layer (`python/lucent/*.py`) turns these into the APIs users know
//! (sentence-transformers' `SentenceTransformer`, llama-cpp-python's `Llama`,
//! openai-whisper's `transcribe`).
//!
//! Every call that computes releases the GIL (`Python::detach`), so Python threads run
//! lucent in parallel. A model opened with `n_threads` runs its calls in a
//! [`lucent::Runtime`] of its own ([`Threads`]); otherwise in lucent's default runtime. Arrays come back without copies: embeddings move their buffer
//! into numpy, trace tensors are read-only views of lucent's own storage kept alive by
//! the array's base object.
//!
//! [`TextModel`]: lucent::pipeline::TextModel

mod embed;
mod generate;
mod model;
mod tool_calls;
mod tools;
mod transcribe;

use pyo3::prelude::*;

pyo3::create_exception!(
    _lucent,
    LucentError,
    pyo3::exceptions::PyException,
    "An error from lucent: its message names the file, tensor, key or argument at fault and what to do."
);

/// lucent's error as a Python `LucentError` carrying its message.
pub(crate) fn to_py(e: lucent::Error) -> PyErr {
    LucentError::new_err(e.to_string())
}

/// A lucent result as a Python result.
pub(crate) trait OrPy<T> {
    /// Map lucent's error to `LucentError`.
    fn or_py(self) -> PyResult<T>;
}

impl<T> OrPy<T> for lucent::Result<T> {
    fn or_py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Where a model's calls run: a [`lucent::Runtime`] of its own (`n_threads` given), or
/// lucent's default runtime. The one place the package chooses lucent's threads.
#[derive(Clone)]
pub(crate) struct Threads(Option<lucent::Runtime>);

impl Threads {
    /// A runtime of `n` threads (0: the machine's physical cores), or the default one.
    pub(crate) fn new(n: Option<usize>) -> PyResult<Self> {
        let rt = n
            .map(|n| lucent::Runtime::builder().threads(n).build())
            .transpose()
            .or_py()?;
        Ok(Threads(rt))
    }

    /// Run `f` (lucent's work) in this runtime; the calling thread waits.
    pub(crate) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.0 {
            Some(rt) => rt.install(f),
            None => f(),
        }
    }

    /// The threads lucent's kernels use here.
    pub(crate) fn count(&self) -> usize {
        self.run(lucent::threads)
    }
}

/// Set how many threads lucent's kernels use by default, for the whole process (0: the
/// machine's physical cores). Only before the first model runs: later it raises
/// `LucentError` (unless the count is unchanged).
#[pyfunction]
fn set_threads(n: usize) -> PyResult<()> {
    lucent::set_threads(n).or_py()
}

/// The number of threads lucent's kernels use.
#[pyfunction]
fn threads() -> usize {
    lucent::threads()
}

/// The models lucent knows by name: (name, kind, family, task).
#[pyfunction]
fn known_models() -> Vec<(String, String, String, String)> {
    lucent::model::family::registry::KNOWN_MODELS
        .iter()
        .map(|m| {
            (
                m.name.to_string(),
                model::kind_name(m.kind).to_string(),
                m.family.to_string(),
                m.task.to_string(),
            )
        })
        .collect()
}

/// The module `lucent._lucent`.
#[pymodule]
fn _lucent(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("LucentError", m.py().get_type::<LucentError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    m.add_function(wrap_pyfunction!(threads, m)?)?;
    m.add_function(wrap_pyfunction!(known_models, m)?)?;
    m.add_class::<embed::Embedder>()?;
    m.add_class::<generate::Generator>()?;
    m.add_class::<generate::TokenStream>()?;
    m.add_class::<model::Model>()?;
    m.add_class::<model::Trace>()?;
    m.add_class::<transcribe::Transcriber>()?;
    tools::register(m)?;
    tool_calls::register(m)?;
    Ok(())
}
