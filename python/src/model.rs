//! `Model` and `Trace`: any model lucent opens ([`lucent::open`]), and the named
//! intermediates of one forward pass ([`lucent::Trace`]) as numpy arrays.
//!
//! A trace's arrays are read-only views of lucent's own tensors, not copies: the array's
//! base object is the `Trace`, which keeps the tensors (and so their storage) alive.

use std::sync::Arc;

use lucent::{ModelKind, Tensor, TraceFilter};
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{PyArray, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{OrPy, Threads};

/// `encoder`, `decoder` or `encoder_decoder`.
pub fn kind_name(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Encoder => "encoder",
        ModelKind::Decoder => "decoder",
        ModelKind::EncoderDecoder => "encoder_decoder",
    }
}

/// A model lucent can run, of a known kind: its config, its tokens, its trace.
#[pyclass(module = "lucent._lucent", frozen)]
pub struct Model {
    inner: Arc<lucent::Model>,
    threads: Threads,
}

#[pymethods]
impl Model {
    /// Open a model by name (`minilm`, `smollm2`, `gemma3`; fetched on first use) or by
    /// path (a `.gguf` file, a Hugging Face folder, a `lucent train` run). `n_threads`:
    /// a runtime of that many kernel threads for this model alone (None: lucent's
    /// default). `precision`: how its products are computed (`exact`, `bf16` or `int8`
    /// for encoders; [`lucent::OpenOptions::precision`] refuses the others in one line).
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
        let inner = py
            .detach(|| {
                lucent::OpenOptions::new()
                    .precision(precision)
                    .open(&name_or_path)
            })
            .or_py()?;
        Ok(Model {
            inner: Arc::new(inner),
            threads,
        })
    }

    /// The name it was opened by (a known name, or the file's stem).
    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// How its products are computed: `exact`, `bf16` or `int8`.
    #[getter]
    fn precision(&self) -> &'static str {
        self.inner.precision().name()
    }

    /// The file or folder it was loaded from.
    #[getter]
    fn path(&self) -> String {
        self.inner.path().display().to_string()
    }

    /// `encoder`, `decoder` or `encoder_decoder`.
    #[getter]
    fn kind(&self) -> &'static str {
        kind_name(self.inner.kind())
    }

    /// The checked configuration (lucent's `ModelConfig`) as JSON.
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(self.inner.config()).map_err(|e| {
            crate::LucentError::new_err(format!("cannot write the config as JSON: {e}"))
        })
    }

    /// The tokens of `text` as the model reads it: `[{"id", "piece", "text",
    /// "special"}, …]`.
    fn tokens<'py>(&self, py: Python<'py>, text: String) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let inner = self.inner.clone();
        let toks = py.detach(move || inner.tokens(&text)).or_py()?;
        toks.into_iter()
            .map(|t| {
                let d = PyDict::new(py);
                d.set_item("id", t.id)?;
                d.set_item("piece", t.piece)?;
                d.set_item("text", t.text)?;
                d.set_item("special", t.special)?;
                Ok(d)
            })
            .collect()
    }

    /// Every intermediate of the forward pass over `text` (or only the `leaves`, e.g.
    /// `["weights"]`, in the `layers`, under `prefix`). The GIL is released while it
    /// runs.
    #[pyo3(signature = (text, leaves = None, layers = None, prefix = None))]
    fn trace(
        &self,
        py: Python<'_>,
        text: String,
        leaves: Option<Vec<String>>,
        layers: Option<Vec<usize>>,
        prefix: Option<String>,
    ) -> PyResult<Trace> {
        let inner = self.inner.clone();
        let threads = self.threads.clone();
        let filter = TraceFilter {
            leaves,
            layers,
            prefix,
        };
        let tr = py
            .detach(move || {
                threads.run(move || inner.trace_with(&text, lucent::Trace::with_filter(filter)))
            })
            .or_py()?;
        Ok(Trace {
            entries: tr.entries().to_vec(),
            tokens: tr.tokens().to_vec(),
            target_tokens: tr.target_tokens().to_vec(),
        })
    }

    /// Every hook point, in the order a pass reaches them: (TransformerLens name, trace
    /// name, `rows` | `heads` | `pattern`).
    fn hook_points(&self) -> Vec<(String, String, &'static str)> {
        self.inner
            .hook_points()
            .into_iter()
            .map(|p| {
                let kind = match p.shape {
                    lucent::model::hooks::PointShape::Rows { .. } => "rows",
                    lucent::model::hooks::PointShape::Heads { .. } => "heads",
                    lucent::model::hooks::PointShape::Pattern { .. } => "pattern",
                };
                (p.name, p.trace_name, kind)
            })
            .collect()
    }

    /// One pass over `text` with `interventions_json` (lucent's Intervention JSON) and
    /// `patches` ((trace name, array of that point's lucent shape): every element
    /// written, as a patch from a run that had those values), recording the `leaves`
    /// (None: everything) and the logits. The GIL is released while it runs.
    #[pyo3(signature = (text, interventions_json = None, patches = Vec::new(), leaves = None))]
    fn run_edited<'py>(
        &self,
        py: Python<'py>,
        text: String,
        interventions_json: Option<String>,
        patches: Vec<(String, numpy::PyReadonlyArrayDyn<'py, f32>)>,
        leaves: Option<Vec<String>>,
    ) -> PyResult<Trace> {
        let ivs = interventions_of(interventions_json.as_deref())?;
        let mut written = Vec::with_capacity(patches.len());
        for (name, a) in &patches {
            written.push(lucent::nn::Edit {
                name: name.clone(),
                op: lucent::nn::EditOp::Patch(tensor_of(a)?),
                head: None,
                positions: None,
                keys: None,
                unit: None,
            });
        }
        let inner = self.inner.clone();
        let threads = self.threads.clone();
        let filter = TraceFilter {
            leaves: leaves.map(|mut l| {
                l.push("logits".into());
                l
            }),
            ..TraceFilter::default()
        };
        let tr = py
            .detach(move || {
                threads.run(move || {
                    let view = inner.intervene(&ivs)?;
                    let mut edits = view.edits().to_vec();
                    edits.extend(written);
                    inner.trace_with(&text, lucent::Trace::with_filter(filter).with_edits(edits))
                })
            })
            .or_py()?;
        Ok(Trace {
            entries: tr.entries().to_vec(),
            tokens: tr.tokens().to_vec(),
            target_tokens: tr.target_tokens().to_vec(),
        })
    }

    /// Greedy continuation of `text` under `interventions_json` (`max_tokens` new
    /// tokens at most; KV-cached, `lucent::Intervened::generate`).
    #[pyo3(signature = (text, interventions_json, max_tokens = 16))]
    fn generate_intervened(
        &self,
        py: Python<'_>,
        text: String,
        interventions_json: String,
        max_tokens: usize,
    ) -> PyResult<String> {
        let ivs = interventions_of(Some(&interventions_json))?;
        let inner = self.inner.clone();
        let threads = self.threads.clone();
        py.detach(move || {
            threads.run(move || {
                inner
                    .intervene(&ivs)?
                    .generate(&text, &lucent::Sampling::greedy().max_tokens(max_tokens))
            })
        })
        .or_py()
    }

    /// Direct logit attribution (`lucent::Model::logit_attribution`) of the next token
    /// after `text`: `target` (an id) or `token` (a text that is one token), as JSON
    /// (logit, logit_f32, scale, embed, heads [layer][head], mlp, attn_rest, rest, sum).
    #[pyo3(signature = (text, target = None, token = None))]
    fn logit_attribution_json(
        &self,
        py: Python<'_>,
        text: String,
        target: Option<u32>,
        token: Option<String>,
    ) -> PyResult<String> {
        let inner = self.inner.clone();
        let threads = self.threads.clone();
        py.detach(move || {
            threads.run(move || {
                let id = match (target, token) {
                    (Some(id), None) => id,
                    (None, Some(tok)) => {
                        let ids = inner.text_model()?.tokenizer.encode_ids(&tok, false, false)?;
                        match ids.as_slice() {
                            [id] => *id,
                            _ => {
                                return Err(lucent::Error::Argument(format!(
                                    "token {tok:?} is {} tokens for this model; give one token (e.g. \" Paris\") or its id",
                                    ids.len()
                                )))
                            }
                        }
                    }
                    _ => {
                        return Err(lucent::Error::Argument(
                            "logit_attribution: give the token as a text or as an id, not both".into(),
                        ))
                    }
                };
                let a = inner.logit_attribution(&text, id)?;
                let mut v = serde_json::to_value(&a).map_err(|e| lucent::Error::Argument(e.to_string()))?;
                v["target_id"] = id.into();
                Ok(v.to_string())
            })
        })
        .or_py()
    }
}

/// A read-only f32 numpy array as a lucent tensor of the same shape (a copy).
fn tensor_of(a: &numpy::PyReadonlyArrayDyn<'_, f32>) -> PyResult<Tensor> {
    let view = a.as_array();
    let shape = view.shape().to_vec();
    Tensor::new(view.iter().copied().collect(), &shape).or_py()
}

/// The interventions of a JSON text (one object or a list), none for `None`.
fn interventions_of(json: Option<&str>) -> PyResult<Vec<lucent::Intervention>> {
    match json {
        Some(j) => lucent::Intervention::parse_json(j).or_py(),
        None => Ok(Vec::new()),
    }
}

/// The named intermediates of one forward pass, in the order they were produced.
#[pyclass(module = "lucent._lucent", frozen)]
pub struct Trace {
    entries: Vec<(String, Tensor)>,
    tokens: Vec<String>,
    target_tokens: Vec<String>,
}

impl Trace {
    fn find(&self, name: &str) -> PyResult<&Tensor> {
        self.entries
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| {
                let some: Vec<&str> = self
                    .entries
                    .iter()
                    .take(6)
                    .map(|(n, _)| n.as_str())
                    .collect();
                PyKeyError::new_err(format!(
                    "the trace recorded no {name:?} ({} names, e.g. {some:?}); see Trace.names()",
                    self.entries.len()
                ))
            })
    }
}

#[pymethods]
impl Trace {
    /// The input's tokens (labels of the positions).
    #[getter]
    fn tokens(&self) -> Vec<String> {
        self.tokens.clone()
    }

    /// An encoder-decoder's target tokens (the decoder's positions); empty otherwise.
    #[getter]
    fn target_tokens(&self) -> Vec<String> {
        self.target_tokens.clone()
    }

    /// Every recorded name, in order (`encoder.layer.0.attn.weights`, …).
    fn names(&self) -> Vec<String> {
        self.entries.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The shape of the tensor `name`.
    fn shape(&self, name: &str) -> PyResult<Vec<usize>> {
        Ok(self.find(name)?.shape().to_vec())
    }

    fn __len__(&self) -> usize {
        self.entries.len()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, _)| n == name)
    }

    /// The tensor `name` as a read-only float32 numpy array: a view of lucent's own
    /// storage (no copy), kept alive by this trace.
    fn __getitem__<'py>(
        slf: Bound<'py, Self>,
        name: &str,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let this = slf.get();
        let t = this.find(name)?;
        let view = ArrayViewD::from_shape(IxDyn(t.shape()), t.data()).map_err(|e| {
            crate::LucentError::new_err(format!("tensor {name} does not fit its shape: {e}"))
        })?;
        // SAFETY: the view points into the storage of a tensor this (frozen, immutable)
        // trace owns; the trace is the array's base object, so the storage lives as
        // long as the array, and nothing writes to it: lucent's tensors share storage
        // copy-on-write, and the array is made read-only below.
        let array = unsafe { PyArray::borrow_from_array(&view, slf.clone().into_any()) };
        array.readwrite().make_nonwriteable();
        Ok(array)
    }
}
