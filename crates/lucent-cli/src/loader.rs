//! The one place the commands open models: `-m NAME|PATH` through `lucent::open_with`,
//! with progress bars for a first fetch. Commands depend on this loader, never on each
//! other.

use std::sync::Arc;

use lucent::pipeline::generate::TextModel;
use lucent::{Embedder, Model, Precision, Result};

use crate::progress::Bars;

/// Open a model by name or path (fetching a known one on first use, with progress).
pub fn open(spec: &str) -> Result<Model> {
    lucent::open_with(spec, &mut Bars::default())
}

/// [`open`] with its products computed in `precision` (`--precision`).
pub fn open_in(spec: &str, precision: Precision) -> Result<Model> {
    lucent::OpenOptions::new()
        .precision(precision)
        .open_with(spec, &mut Bars::default())
}

/// Open a decoder (a GGUF model, a trained language model) for generation.
pub fn text_model(spec: &str) -> Result<Arc<TextModel>> {
    open(spec)?.text_model()
}

/// Open an encoder for sentence embeddings.
pub fn embedder(spec: &str) -> Result<Arc<Embedder>> {
    embedder_in(spec, Precision::Exact)
}

/// [`embedder`] with its products computed in `precision` (`--precision`).
pub fn embedder_in(spec: &str, precision: Precision) -> Result<Arc<Embedder>> {
    let model = open_in(spec, precision)?;
    let e = model.embedder()?;
    if e.name() == model.name() {
        return Ok(e);
    }
    let mut named = e.as_ref().clone();
    named.set_name(model.name());
    Ok(Arc::new(named))
}
