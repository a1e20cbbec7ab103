//! `Trace`: a recorder a forward pass can be given, keeping named intermediates.
//!
//! This is how `lucent attention` shows what the guides show on paper: for each layer
//! and head, the queries Q, keys K and values V, the raw scores Q·Kᵀ, the scaled scores
//! Q·Kᵀ/√d_k, the additive mask, the softmax weights and the output. Every forward in
//! [`crate::nn`] takes an `Option<&mut Trace>`; with `None` nothing is recorded and
//! nothing extra is computed (the raw scores, for example, are only formed when a trace
//! asks for them, since the fused attention kernel never materialises them).
//!
//! Names are dotted paths built from scopes, e.g. `encoder.layer.0.attn.q`:
//!
//! | leaf | tensor | shape |
//! | --- | --- | --- |
//! | `input` | what a stack receives (the residual stream's start), or a sub-layer (after a pre-norm) | (b, t, d) |
//! | `q` | queries after projection (and QK-norm, RoPE) | (b, h, t_q, d_k) |
//! | `k`, `v` | keys, values (the whole cache when decoding) | (b, h_kv, t_k, d_k) |
//! | `scores` | raw Q·Kᵀ, per query head | (b, h, t_q, t_k) |
//! | `scaled` | Q·Kᵀ · scale | (b, h, t_q, t_k) |
//! | `mask` | what is added before softmax (0 or −∞, plus any bias) | (b, h, t_q, t_k) |
//! | `weights` | softmax(scaled + mask) | (b, h, t_q, t_k) |
//! | `context` | weights · V, per head | (b, h, t_q, d_v) |
//! | `output` | the sub-layer's or layer's output | (b, t, d) |
//! | `router_logits`, `router_probs` | a mixture of experts' router logits W_g·x and their softmax (`nn/moe.rs`) | (b, t, n_experts) |
//! | `experts`, `expert_weights` | the k experts each position chose (indices as f32, most probable first) and their weights | (b, t, k) |
//!
//! Heads are always index 1. A [`TraceFilter`] keeps real models from storing
//! everything: only some leaves (e.g. just `weights`), only some layers, or only names
//! under a prefix.
//!
//! The same points can be written: a trace may carry [`Edit`]s ([`Trace::with_edits`]),
//! which [`hook`] applies to a tensor before recording it and handing it on, so the rest
//! of the pass computes with the edited values (ablation, patching, steering; see
//! `crate::nn::edit`). TransformerLens's names for these points (`blocks.3.attn.hook_z`)
//! are mapped onto these in one table in the model layer (`model/hooks.rs`).

use crate::nn::edit::Edit;
use crate::tensor::Tensor;
use crate::Result;

/// Which intermediates a [`Trace`] keeps. The default keeps everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceFilter {
    /// Keep only these leaf names (the last dotted part: `"weights"`, `"q"`, ...); `None`
    /// keeps every leaf.
    pub leaves: Option<Vec<String>>,
    /// Keep only names inside `layer.L` for these L; `None` keeps every layer (names that
    /// are in no layer, such as a stack's final output, are kept by any layer filter).
    pub layers: Option<Vec<usize>>,
    /// Keep only names starting with this prefix (e.g. `"decoder."`).
    pub prefix: Option<String>,
}

impl TraceFilter {
    /// Whether the full dotted `name` passes the filter.
    pub fn accepts(&self, name: &str) -> bool {
        let leaf = name.rsplit('.').next().unwrap_or(name);
        if let Some(leaves) = &self.leaves {
            if !leaves.iter().any(|l| l == leaf) {
                return false;
            }
        }
        if let Some(prefix) = &self.prefix {
            if !name.starts_with(prefix.as_str()) {
                return false;
            }
        }
        if let Some(layers) = &self.layers {
            if let Some(l) = layer_of(name) {
                if !layers.contains(&l) {
                    return false;
                }
            }
        }
        true
    }
}

/// The L of the first `layer.L` part of a dotted name, if any.
fn layer_of(name: &str) -> Option<usize> {
    let mut parts = name.split('.');
    while let Some(p) = parts.next() {
        if p == "layer" {
            return parts.next().and_then(|n| n.parse().ok());
        }
    }
    None
}

/// A recorder of named intermediate tensors, in the order they were produced.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    filter: TraceFilter,
    scope: Vec<String>,
    entries: Vec<(String, Tensor)>,
    /// The input's tokens, as labels for the positions (set by whoever ran the pass).
    tokens: Vec<String>,
    /// An encoder-decoder's target tokens (the decoder's positions).
    target_tokens: Vec<String>,
    /// Whether the pass may stop after the last layer the filter keeps.
    stop_when_done: bool,
    /// Writes at hook points, applied in order where their names come up.
    edits: Vec<Edit>,
}

impl Trace {
    /// A trace that keeps everything.
    pub fn new() -> Self {
        Trace::default()
    }

    /// A trace that keeps what `filter` accepts.
    pub fn with_filter(filter: TraceFilter) -> Self {
        Trace {
            filter,
            ..Trace::default()
        }
    }

    /// A trace that keeps only these leaves, e.g. `Trace::only(&["weights"])`.
    pub fn only(leaves: &[&str]) -> Self {
        Trace::with_filter(TraceFilter {
            leaves: Some(leaves.iter().map(|s| s.to_string()).collect()),
            ..TraceFilter::default()
        })
    }

    /// Restrict this trace to layers `layers` (keeps its other filters).
    pub fn in_layers(mut self, layers: &[usize]) -> Self {
        self.filter.layers = Some(layers.to_vec());
        self
    }

    /// Let the forward pass stop once every layer the filter keeps has run (a filter
    /// with `layers` only): the explorer asks for layer 3's weights without paying for
    /// the 26 layers after it. The pass's output is then that layer's, not the model's;
    /// use it when only the recorded intermediates matter.
    pub fn stop_when_done(mut self) -> Self {
        self.stop_when_done = true;
        self
    }

    /// Whether a pass that has just run layer `i` of a stack may stop (see
    /// [`Trace::stop_when_done`]).
    pub fn done_after_layer(&self, i: usize) -> bool {
        self.stop_when_done
            && self
                .filter
                .layers
                .as_ref()
                .is_some_and(|ls| ls.iter().all(|&l| l <= i))
    }

    /// This trace, also writing `edits` at their hook points (they apply in order; the
    /// filter decides only what is recorded, never what is edited).
    pub fn with_edits(mut self, edits: Vec<Edit>) -> Self {
        self.edits = edits;
        self
    }

    /// The edits this trace writes.
    pub fn edits(&self) -> &[Edit] {
        &self.edits
    }

    /// Whether an edit writes `leaf` in the current scope.
    pub fn has_edit(&self, leaf: &str) -> bool {
        !self.edits.is_empty() && {
            let name = self.full_name(leaf);
            self.edits.iter().any(|e| e.name == name)
        }
    }

    /// `t` with every edit at `leaf` (in the current scope) applied; `t` itself when
    /// none is.
    pub fn edit(&self, leaf: &str, t: Tensor) -> Result<Tensor> {
        if self.edits.is_empty() {
            return Ok(t);
        }
        let name = self.full_name(leaf);
        let mut t = t;
        for e in self.edits.iter().filter(|e| e.name == name) {
            e.apply(&mut t)?;
        }
        Ok(t)
    }

    /// The filter in use.
    pub fn filter(&self) -> &TraceFilter {
        &self.filter
    }

    /// Enter a scope: later names get `scope.` in front (scopes nest).
    pub fn push_scope(&mut self, scope: impl Into<String>) {
        self.scope.push(scope.into());
    }

    /// Leave the innermost scope.
    pub fn pop_scope(&mut self) {
        self.scope.pop();
    }

    /// The full dotted name of `leaf` in the current scope.
    pub fn full_name(&self, leaf: &str) -> String {
        if self.scope.is_empty() {
            leaf.to_string()
        } else {
            format!("{}.{leaf}", self.scope.join("."))
        }
    }

    /// Whether a tensor named `leaf` in the current scope would be kept. Forwards ask
    /// this before computing anything that exists only to be recorded.
    pub fn wants(&self, leaf: &str) -> bool {
        self.filter.accepts(&self.full_name(leaf))
    }

    /// Keep `t` as `leaf` in the current scope, if the filter accepts it (cheap: tensors
    /// share their storage).
    pub fn record(&mut self, leaf: &str, t: &Tensor) {
        let name = self.full_name(leaf);
        if self.filter.accepts(&name) {
            self.entries.push((name, t.clone()));
        }
    }

    /// The tensor recorded under the full dotted `name` (the latest, if recorded twice).
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.entries
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }

    /// All recorded names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// All recorded (name, tensor) pairs, in order.
    pub fn entries(&self) -> &[(String, Tensor)] {
        &self.entries
    }

    /// The number of recorded tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Label the input's positions with its tokens.
    pub fn set_tokens(&mut self, tokens: Vec<String>) {
        self.tokens = tokens;
    }

    /// The input's tokens (empty if the caller set none).
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Label an encoder-decoder's target positions with its tokens.
    pub fn set_target_tokens(&mut self, tokens: Vec<String>) {
        self.target_tokens = tokens;
    }

    /// An encoder-decoder's target tokens (empty otherwise).
    pub fn target_tokens(&self) -> &[String] {
        &self.target_tokens
    }

    /// Forget every recorded tensor (keeps the filter).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Run `f` inside `scope` of an optional trace: the scope is entered before and left
/// after, whatever `f` returns. With `None`, just runs `f`.
pub fn scoped<R>(
    trace: Option<&mut Trace>,
    scope: &str,
    f: impl FnOnce(Option<&mut Trace>) -> R,
) -> R {
    match trace {
        Some(tr) => {
            tr.push_scope(scope);
            let r = f(Some(&mut *tr));
            tr.pop_scope();
            r
        }
        None => f(None),
    }
}

/// Record `t` as `leaf` into an optional trace.
pub fn record(trace: &mut Option<&mut Trace>, leaf: &str, t: &Tensor) {
    if let Some(tr) = trace.as_deref_mut() {
        tr.record(leaf, t);
    }
}

/// A hook point: `t` with the trace's edits at `leaf` applied, recorded as `leaf`, and
/// handed back for the pass to go on with. With `None`, `t` itself, at no cost.
pub fn hook(trace: &mut Option<&mut Trace>, leaf: &str, t: Tensor) -> Result<Tensor> {
    match trace.as_deref_mut() {
        Some(tr) => {
            let t = tr.edit(leaf, t)?;
            tr.record(leaf, &t);
            Ok(t)
        }
        None => Ok(t),
    }
}

/// Whether an optional trace wants `leaf` (false for `None`).
pub fn wants(trace: &Option<&mut Trace>, leaf: &str) -> bool {
    trace.as_deref().is_some_and(|tr| tr.wants(leaf))
}

/// Run `f` inside `scope` of every trace of a batch (one optional trace per sequence):
/// the scope is entered before and left after, whatever `f` returns.
pub fn scoped_each<R>(
    traces: &mut [Option<&mut Trace>],
    scope: &str,
    f: impl FnOnce(&mut [Option<&mut Trace>]) -> R,
) -> R {
    for tr in traces.iter_mut().flatten() {
        tr.push_scope(scope);
    }
    let r = f(traces);
    for tr in traces.iter_mut().flatten() {
        tr.pop_scope();
    }
    r
}

/// Record row i of `t` (a batch of sequences along its first axis) as `leaf` into
/// trace i, for the traces that want it.
///
/// # Shapes
/// t: (n, ...) → each trace gets (1, ...)
pub fn record_rows(traces: &mut [Option<&mut Trace>], leaf: &str, t: &Tensor) -> crate::Result<()> {
    for (i, tr) in traces.iter_mut().enumerate() {
        if let Some(tr) = tr.as_deref_mut() {
            if tr.wants(leaf) {
                tr.record(leaf, &t.narrow(0, i, 1)?);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_build_dotted_names_and_filters_select() {
        let t = Tensor::zeros(&[1]);
        let mut tr = Trace::only(&["weights"]).in_layers(&[1]);
        for l in 0..3 {
            scoped(Some(&mut tr), &format!("encoder.layer.{l}"), |tr| {
                scoped(tr, "attn", |mut tr| {
                    record(&mut tr, "q", &t);
                    record(&mut tr, "weights", &t);
                });
            });
        }
        let names: Vec<&str> = tr.names().collect();
        assert_eq!(names, ["encoder.layer.1.attn.weights"]);
        assert!(tr.get("encoder.layer.1.attn.weights").is_some());
        assert!(tr.full_name("x") == "x", "scopes are left after scoped()");
        let mut all = Trace::new();
        all.push_scope("decoder");
        all.record("output", &t);
        assert_eq!(all.names().collect::<Vec<_>>(), ["decoder.output"]);
        let f = TraceFilter {
            prefix: Some("encoder.".into()),
            ..Default::default()
        };
        assert!(f.accepts("encoder.layer.0.attn.q") && !f.accepts("decoder.layer.0.attn.q"));
        let early = Trace::only(&["weights"])
            .in_layers(&[1, 3])
            .stop_when_done();
        assert!(!early.done_after_layer(2) && early.done_after_layer(3));
        assert!(!Trace::only(&["weights"])
            .in_layers(&[0])
            .done_after_layer(5));
        assert!(!Trace::new().stop_when_done().done_after_layer(5));
    }
}
