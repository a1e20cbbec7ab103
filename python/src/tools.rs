//! The guides' tools as plain functions: parameter counts, the shape after every step,
//! memory figures, attention masks, position tables, softmax with temperature.
//!
//! Configs are a preset name (`gpt2`, `bert-base`, …; `None`: a GPT-2-style decoder)
//! with dimension overrides, exactly as `lucent params --preset NAME --d-model …` takes
//! them. Counts and shapes come back as JSON (the Python layer parses it); tables and
//! masks as numpy arrays.

use lucent::model::memory::MemoryEstimate;
use lucent::model::params::ParamCount;
use lucent::model::presets::{resolve, ConfigOverrides, PRESETS};
use lucent::model::shapes::forward_shapes;
use lucent::model::ModelConfig;
use lucent::nn::mask::{bidirectional_mask, causal_mask, padding_mask, prefix_lm_mask, Mask};
use lucent::nn::position::{Alibi, SinusoidalEncoding};
use lucent::ops::softmax_with_temperature;
use lucent::{Dtype, Tensor};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2, PyArrayDyn, ToPyArray};
use pyo3::prelude::*;

use crate::OrPy;

/// Register the tools in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(config_json, m)?)?;
    m.add_function(wrap_pyfunction!(params_json, m)?)?;
    m.add_function(wrap_pyfunction!(shapes_json, m)?)?;
    m.add_function(wrap_pyfunction!(memory_json, m)?)?;
    m.add_function(wrap_pyfunction!(mask, m)?)?;
    m.add_function(wrap_pyfunction!(sinusoidal_table, m)?)?;
    m.add_function(wrap_pyfunction!(rope_angles, m)?)?;
    m.add_function(wrap_pyfunction!(alibi_slopes, m)?)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    Ok(())
}

/// The config of `preset` (None: a GPT-2-style decoder) with the overrides applied.
#[allow(clippy::too_many_arguments)]
fn config(
    preset: Option<&str>,
    d_model: Option<usize>,
    heads: Option<usize>,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
    d_ff: Option<usize>,
    layers: Option<usize>,
    vocab_size: Option<usize>,
    max_positions: Option<usize>,
) -> PyResult<ModelConfig> {
    let o = ConfigOverrides {
        d_model,
        heads,
        kv_heads,
        head_dim,
        d_ff,
        layers,
        vocab_size,
        max_positions,
        ..ConfigOverrides::default()
    };
    resolve(preset, &o).or_py()
}

fn json(v: &impl serde::Serialize) -> PyResult<String> {
    serde_json::to_string(v)
        .map_err(|e| crate::LucentError::new_err(format!("cannot write JSON: {e}")))
}

/// A tensor as an owned numpy array of its shape.
fn array<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let a = numpy::ndarray::ArrayD::from_shape_vec(t.shape(), t.data().to_vec())
        .map_err(|e| crate::LucentError::new_err(format!("tensor does not fit its shape: {e}")))?;
    Ok(a.into_pyarray(py))
}

/// The presets: `[(name, description), …]`.
#[pyfunction]
fn presets() -> Vec<(&'static str, &'static str)> {
    PRESETS.iter().map(|p| (p.name, p.description)).collect()
}

/// The checked `ModelConfig` of a preset with overrides, as JSON.
#[pyfunction]
#[pyo3(signature = (preset = None, *, d_model = None, heads = None, kv_heads = None, head_dim = None,
    d_ff = None, layers = None, vocab_size = None, max_positions = None))]
#[allow(clippy::too_many_arguments)]
fn config_json(
    preset: Option<&str>,
    d_model: Option<usize>,
    heads: Option<usize>,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
    d_ff: Option<usize>,
    layers: Option<usize>,
    vocab_size: Option<usize>,
    max_positions: Option<usize>,
) -> PyResult<String> {
    json(&config(
        preset,
        d_model,
        heads,
        kv_heads,
        head_dim,
        d_ff,
        layers,
        vocab_size,
        max_positions,
    )?)
}

/// Exact parameter counts of a config, component by component (lucent's
/// `ParamCount`), as JSON: embeddings, per stack and per layer, head, total.
#[pyfunction]
#[pyo3(signature = (preset = None, *, d_model = None, heads = None, kv_heads = None, head_dim = None,
    d_ff = None, layers = None, vocab_size = None, max_positions = None))]
#[allow(clippy::too_many_arguments)]
fn params_json(
    preset: Option<&str>,
    d_model: Option<usize>,
    heads: Option<usize>,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
    d_ff: Option<usize>,
    layers: Option<usize>,
    vocab_size: Option<usize>,
    max_positions: Option<usize>,
) -> PyResult<String> {
    let cfg = config(
        preset,
        d_model,
        heads,
        kv_heads,
        head_dim,
        d_ff,
        layers,
        vocab_size,
        max_positions,
    )?;
    let c = ParamCount::of(&cfg).or_py()?;
    let stacks: Vec<serde_json::Value> = c
        .stacks
        .iter()
        .map(|s| {
            serde_json::json!({
                "stack": s.stack,
                "layers": s.layers,
                "per_layer": s.layer,
                "per_layer_total": s.layer.total(),
                "all_layers": s.all_layers(),
                "final_norm": s.final_norm,
                "total": s.total(),
            })
        })
        .collect();
    json(&serde_json::json!({
        "config": cfg,
        "token_embeddings": c.token_embeddings,
        "position_embeddings": c.position_embeddings,
        "token_type_embeddings": c.token_type_embeddings,
        "embedding_norm": c.embedding_norm,
        "embeddings": c.embeddings(),
        "stacks": stacks,
        "pooler": c.pooler,
        "head": c.head,
        "head_tied": c.head_tied,
        "total": c.total(),
    }))
}

/// The shape after every step of a forward pass over `batch` sequences of `seq`
/// tokens (`src_seq`: an encoder-decoder's source length), as JSON.
#[pyfunction]
#[pyo3(signature = (preset = None, *, batch = 1, seq = 8, src_seq = None, d_model = None, heads = None,
    kv_heads = None, head_dim = None, d_ff = None, layers = None, vocab_size = None, max_positions = None))]
#[allow(clippy::too_many_arguments)]
fn shapes_json(
    preset: Option<&str>,
    batch: usize,
    seq: usize,
    src_seq: Option<usize>,
    d_model: Option<usize>,
    heads: Option<usize>,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
    d_ff: Option<usize>,
    layers: Option<usize>,
    vocab_size: Option<usize>,
    max_positions: Option<usize>,
) -> PyResult<String> {
    let cfg = config(
        preset,
        d_model,
        heads,
        kv_heads,
        head_dim,
        d_ff,
        layers,
        vocab_size,
        max_positions,
    )?;
    json(&forward_shapes(&cfg, batch, seq, src_seq).or_py()?)
}

/// Bytes of weights, KV cache and attention scores at `batch` × `seq` in `dtype`
/// (`f32`, `f16`, `bf16`), as JSON.
#[pyfunction]
#[pyo3(signature = (preset = None, *, batch = 1, seq = 1024, dtype = "f32", d_model = None, heads = None,
    kv_heads = None, head_dim = None, d_ff = None, layers = None, vocab_size = None, max_positions = None))]
#[allow(clippy::too_many_arguments)]
fn memory_json(
    preset: Option<&str>,
    batch: usize,
    seq: usize,
    dtype: &str,
    d_model: Option<usize>,
    heads: Option<usize>,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
    d_ff: Option<usize>,
    layers: Option<usize>,
    vocab_size: Option<usize>,
    max_positions: Option<usize>,
) -> PyResult<String> {
    let dt = match dtype {
        "f32" | "float32" => Dtype::F32,
        "f16" | "float16" => Dtype::F16,
        "bf16" | "bfloat16" => Dtype::BF16,
        other => {
            return Err(crate::LucentError::new_err(format!(
                "dtype {other:?} is not one of f32, f16, bf16"
            )))
        }
    };
    let cfg = config(
        preset,
        d_model,
        heads,
        kv_heads,
        head_dim,
        d_ff,
        layers,
        vocab_size,
        max_positions,
    )?;
    let m: MemoryEstimate = MemoryEstimate::of(&cfg, batch, seq, dt).or_py()?;
    json(&m)
}

/// An attention mask as a boolean (batch, t, t) array, true = query i may see key j:
/// `causal`, `bidirectional`, `prefix_lm` (keys before `prefix` are seen by all) or
/// `padding` (one row per entry of `lengths`, keys beyond the length hidden).
#[pyfunction]
#[pyo3(signature = (kind, t, *, prefix = 0, lengths = None))]
fn mask<'py>(
    py: Python<'py>,
    kind: &str,
    t: usize,
    prefix: usize,
    lengths: Option<Vec<usize>>,
) -> PyResult<Bound<'py, numpy::PyArray3<bool>>> {
    let m: Mask = match kind {
        "causal" => causal_mask(t),
        "bidirectional" => bidirectional_mask(t),
        "prefix_lm" => prefix_lm_mask(t, prefix),
        "padding" => padding_mask(lengths.as_deref().unwrap_or(&[t]), t),
        other => {
            return Err(crate::LucentError::new_err(format!(
                "mask kind {other:?} is not one of causal, bidirectional, prefix_lm, padding"
            )))
        }
    }
    .or_py()?;
    let (b, tq, tk) = (m.batch(), m.t_q(), m.t_k());
    let mut v = Vec::with_capacity(b * tq * tk);
    for bi in 0..b {
        for row in m.matrix(bi) {
            v.extend(row);
        }
    }
    let a = numpy::ndarray::Array3::from_shape_vec((b, tq, tk), v).map_err(|e| {
        crate::LucentError::new_err(format!("mask does not fit ({b}, {tq}, {tk}): {e}"))
    })?; // (b, t_q, t_k)
    Ok(a.into_pyarray(py))
}

/// The sinusoidal position table PE (max_len, d) of "Attention Is All You Need".
#[pyfunction]
fn sinusoidal_table<'py>(
    py: Python<'py>,
    max_len: usize,
    d: usize,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let pe = SinusoidalEncoding::new(max_len, d).or_py()?;
    array(py, pe.table()) // (max_len, d)
}

/// RoPE's angles p·θᵢ, θᵢ = base^(−2i/d), for positions 0..t and pairs i of a head of
/// `head_dim` features: a (t, head_dim / 2) float64 array.
#[pyfunction]
#[pyo3(signature = (t, head_dim, base = 10000.0))]
fn rope_angles<'py>(
    py: Python<'py>,
    t: usize,
    head_dim: usize,
    base: f32,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let rope =
        lucent::nn::position::Rope::new(head_dim, base, lucent::ops::RopeConvention::Interleaved)
            .or_py()?;
    let half = head_dim / 2;
    let a = Array2::from_shape_fn((t, half), |(p, i)| p as f64 * rope.inv_freq(i)); // (t, d/2)
    Ok(a.into_pyarray(py))
}

/// ALiBi's slope of each head (Press et al. 2021): 2^(−8h/n) for heads h = 1..n.
#[pyfunction]
fn alibi_slopes(n_heads: usize) -> PyResult<Vec<f64>> {
    Alibi::new(n_heads).or_py()?;
    Ok(Alibi::slopes_f64(n_heads))
}

/// softmax(x / T) over the last axis of `x` (T finite and > 0).
#[pyfunction]
#[pyo3(signature = (x, temperature = 1.0))]
fn softmax<'py>(
    py: Python<'py>,
    x: numpy::PyReadonlyArrayDyn<'py, f32>,
    temperature: f32,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let view = x.as_array();
    let shape = view.shape().to_vec();
    let t = Tensor::new(view.iter().copied().collect(), &shape).or_py()?;
    let out = softmax_with_temperature(&t, temperature).or_py()?;
    let a = numpy::ndarray::ArrayD::from_shape_vec(shape, out.data().to_vec()).map_err(|e| {
        crate::LucentError::new_err(format!("softmax result does not fit its shape: {e}"))
    })?;
    Ok(a.to_pyarray(py))
}
