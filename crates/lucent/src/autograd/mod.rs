//! Reverse-mode automatic differentiation over [`Tensor`] operations (the "tape on the
//! tensors" design of PyTorch).
//!
//! A parameter is a tensor marked with [`Tensor::requires_grad`]: it carries a leaf
//! [`Node`]. Every public tensor operation the `nn` blocks use (`add`, `mul`, `matmul`,
//! `layer_norm`, `attention`, ...) checks, at its entry point, whether gradients are
//! being recorded (grad mode on, see [`no_grad`]) and whether any input carries a node.
//! Only then does it give its output a new node holding the inputs' nodes and a backward
//! rule ([`rules`]). An inference run has no parameter nodes, so it records nothing and
//! pays one branch per op: a model written once from the `nn` blocks both infers and
//! trains.
//!
//! [`Tensor::backward`] walks the recorded graph from a scalar loss L in reverse
//! topological order and applies the chain rule: for y = f(x₁, …, xₙ) it turns ∂L/∂y into
//! ∂L/∂xᵢ with the rule of f, summing the contributions of every use of xᵢ. Gradients of
//! leaves accumulate in the leaf (read with [`Tensor::grad`], cleared with
//! [`Tensor::zero_grad`]), like `.grad` in PyTorch.
//!
//! Not recorded (their outputs are constants to autograd): [`Tensor::map`],
//! [`Tensor::zip_with`], [`Tensor::add_assign`] and `data_mut` writes; additive
//! attention biases (masks, ALiBi) are treated as constants.
//!
//! Optimisers ([`optim`]) and the parameter visitor ([`params`]) live here too.

pub mod optim;
pub mod params;
pub mod rules;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::tensor::Tensor;
use crate::{Error, Result};

pub use params::{Parameters, ParamsMut};

/// A backward rule: given ∂L/∂output, the gradient for each input (`None` where an input
/// needs none).
pub(crate) type BackwardFn = Box<dyn Fn(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// One recorded operation (or a parameter leaf) in the autograd graph.
pub struct Node {
    /// The operation's name, for error messages ("matmul", "layer_norm", ...).
    op: &'static str,
    /// The shape of the tensor this node belongs to.
    shape: Vec<usize>,
    /// For each input of the op: its node, when that input needs a gradient.
    inputs: Vec<Option<Arc<Node>>>,
    /// The backward rule; `None` for a leaf (a parameter).
    backward: Option<BackwardFn>,
    /// The accumulated gradient of a leaf.
    grad: Mutex<Option<Tensor>>,
}

impl Node {
    /// The name of the operation that made this node ("leaf" for a parameter).
    pub fn op(&self) -> &'static str {
        self.op
    }

    fn is_leaf(&self) -> bool {
        self.backward.is_none()
    }
}

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether operations on this thread record gradients (on unless inside [`no_grad`]).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Run `f` with gradient recording off (evaluation, sampling, optimiser updates), then
/// restore the previous mode, also if `f` panics.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    grad_mode(false, f)
}

/// Run `f` with gradient recording on (the opposite of [`no_grad`]), then restore the
/// previous mode.
pub fn with_grad<R>(f: impl FnOnce() -> R) -> R {
    grad_mode(true, f)
}

/// Run `f` inside the current runtime's pool with this thread's gradient mode (and
/// [`crate::threads::serial`] scope) carried along: how the public entry points that run
/// kernels (model forwards, training steps) reach the runtime's threads.
pub(crate) fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let on = is_grad_enabled();
    crate::threads::in_pool(move || grad_mode(on, f))
}

fn grad_mode<R>(on: bool, f: impl FnOnce() -> R) -> R {
    crate::threads::with_flag(&GRAD_ENABLED, on, f)
}

/// Whether an op over `inputs` must be recorded: grad mode is on and some input carries
/// a node.
pub(crate) fn needs_grad(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.grad_node().is_some())
}

/// Give `out` a node for `op` over `inputs` with the rule `backward`, which returns one
/// gradient per input (in order). Callers check [`needs_grad`] first.
pub(crate) fn record(
    out: Tensor,
    op: &'static str,
    inputs: &[&Tensor],
    backward: impl Fn(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Tensor {
    let node = Node {
        op,
        shape: out.shape().to_vec(),
        inputs: inputs.iter().map(|t| t.grad_node().cloned()).collect(),
        backward: Some(Box::new(backward)),
        grad: Mutex::new(None),
    };
    out.with_grad_node(Some(Arc::new(node)))
}

fn key(n: &Arc<Node>) -> usize {
    Arc::as_ptr(n) as usize
}

impl Tensor {
    /// This tensor as a parameter: a leaf of the autograd graph whose gradient
    /// accumulates in [`Tensor::grad`]. Clones share the leaf (and so the gradient).
    pub fn requires_grad(self) -> Tensor {
        let node = Node {
            op: "leaf",
            shape: self.shape().to_vec(),
            inputs: Vec::new(),
            backward: None,
            grad: Mutex::new(None),
        };
        self.with_grad_node(Some(Arc::new(node)))
    }

    /// Whether this tensor is a parameter leaf.
    pub fn is_parameter(&self) -> bool {
        self.grad_node().is_some_and(|n| n.is_leaf())
    }

    /// Whether this tensor takes part in a recorded graph (a parameter or a result
    /// computed from one while grad mode was on).
    pub fn tracks_grad(&self) -> bool {
        self.grad_node().is_some()
    }

    /// The same values with no autograd history (a constant).
    pub fn detach(&self) -> Tensor {
        self.clone().with_grad_node(None)
    }

    /// The gradient accumulated in this parameter by [`Tensor::backward`] calls, if any.
    pub fn grad(&self) -> Option<Tensor> {
        let node = self.grad_node()?;
        let g = node.grad.lock().ok()?;
        g.clone()
    }

    /// Replace this parameter's accumulated gradient (e.g. after clipping). Does
    /// nothing on a tensor that is not part of a graph.
    pub fn set_grad(&self, grad: Option<Tensor>) {
        if let Some(node) = self.grad_node() {
            if let Ok(mut g) = node.grad.lock() {
                *g = grad;
            }
        }
    }

    /// Clear this parameter's accumulated gradient.
    pub fn zero_grad(&self) {
        if let Some(node) = self.grad_node() {
            if let Ok(mut g) = node.grad.lock() {
                *g = None;
            }
        }
    }

    /// Back-propagate from this one-element tensor (a loss L): every parameter that L
    /// depends on gains ∂L/∂parameter in its [`Tensor::grad`].
    pub fn backward(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::Training(format!(
                "backward() starts from a one-element loss, got a tensor of shape {:?}; reduce it first (e.g. cross_entropy gives the mean)",
                self.shape()
            )));
        }
        self.backward_with(Tensor::full(self.shape(), 1.0))
    }

    /// Back-propagate with a given ∂L/∂self (same shape as self).
    pub fn backward_with(&self, grad: Tensor) -> Result<()> {
        let root = self.grad_node().ok_or_else(|| {
            Error::Training(
                "backward() on a tensor with no autograd history: mark the parameters with requires_grad() and compute outside no_grad()".into(),
            )
        })?;
        if grad.shape() != self.shape() {
            return Err(Error::mismatch(
                "backward_with (gradient vs tensor)",
                grad.shape(),
                self.shape(),
            ));
        }
        propagate(root, grad, &mut |node, g| add_to_leaf(node, g))
    }
}

/// Add `g` to the gradient accumulated in the leaf `node`.
fn add_to_leaf(node: &Arc<Node>, g: Tensor) -> Result<()> {
    let mut slot = node
        .grad
        .lock()
        .map_err(|_| Error::Training("a parameter's gradient lock was poisoned".into()))?;
    *slot = Some(match slot.take() {
        Some(old) => accumulate(old, &g)?,
        None => g,
    });
    Ok(())
}

/// The chain rule from `root` (whose gradient is `grad`) back to the leaves, in reverse
/// topological order; each leaf's total gradient is handed to `leaf` once.
fn propagate(
    root: &Arc<Node>,
    grad: Tensor,
    leaf: &mut dyn FnMut(&Arc<Node>, Tensor) -> Result<()>,
) -> Result<()> {
    let order = topological_order(root);
    no_grad(|| {
        let mut grads: HashMap<usize, Tensor> = HashMap::new();
        grads.insert(key(root), grad.detach());
        for node in order.iter().rev() {
            let Some(g) = grads.remove(&key(node)) else {
                continue;
            };
            let Some(rule) = &node.backward else {
                leaf(node, g)?;
                continue;
            };
            let input_grads = rule(&g)?;
            for (input, ig) in node.inputs.iter().zip(input_grads) {
                let (Some(input), Some(ig)) = (input, ig) else {
                    continue;
                };
                if ig.shape() != input.shape.as_slice() {
                    return Err(Error::Training(format!(
                        "autograd: the backward rule of {} gave a gradient of shape {:?} for an input of shape {:?}",
                        node.op,
                        ig.shape(),
                        input.shape
                    )));
                }
                let k = key(input);
                let merged = match grads.remove(&k) {
                    Some(old) => accumulate(old, &ig)?,
                    None => ig,
                };
                grads.insert(k, merged);
            }
        }
        Ok(())
    })
}

/// Data-parallel training step: the gradient of L = Σᵢ wᵢ·Lᵢ over `shards` parts of a
/// batch, computed on the runtime's pool one shard per task.
///
/// `shard_loss(i)` runs the forward pass of shard i and returns its loss Lᵢ (one
/// element) and weight wᵢ (e.g. its share of the batch's tokens, so that Σ wᵢ·Lᵢ is the
/// mean over the whole batch). Each task records and back-propagates its own graph with
/// kernels on one thread (see [`crate::threads::serial`]); the shards' leaf gradients are
/// then added into the parameters in shard order, so the result does not depend on which
/// task finished first. Returns the Lᵢ.
///
/// This is how several cores train a small model: one graph per core instead of every
/// small kernel split across cores.
pub fn backward_sharded(
    shards: usize,
    shard_loss: impl Fn(usize) -> Result<(Tensor, f32)> + Sync,
) -> Result<Vec<f32>> {
    use rayon::prelude::*;
    type LeafGrads = Vec<(Arc<Node>, Tensor)>;
    let results: Vec<Result<(f32, LeafGrads)>> = crate::runtime::pool::in_pool(|| {
        (0..shards)
            .into_par_iter()
            .map(|i| {
                // A pool thread may pick this task up while it is itself inside a backward
                // pass (no_grad): turn recording on explicitly for the shard.
                with_grad(|| {
                    crate::threads::serial(|| {
                        let (loss, weight) = shard_loss(i)?;
                        let value = loss.item()?;
                        let root = loss.grad_node().cloned().ok_or_else(|| {
                            Error::Training(
                                "backward_sharded: a shard's loss has no autograd history".into(),
                            )
                        })?;
                        let mut leaves = Vec::new();
                        propagate(&root, Tensor::full(loss.shape(), weight), &mut |node, g| {
                            leaves.push((node.clone(), g));
                            Ok(())
                        })?;
                        Ok((value, leaves))
                    })
                })
            })
            .collect()
    });
    let mut values = Vec::with_capacity(shards);
    for r in results {
        let (value, leaves) = r?;
        values.push(value);
        for (node, g) in leaves {
            add_to_leaf(&node, g)?;
        }
    }
    Ok(values)
}

/// old + new, reusing old's buffer.
fn accumulate(mut old: Tensor, new: &Tensor) -> Result<Tensor> {
    if old.shape() != new.shape() {
        return Err(Error::mismatch(
            "gradient accumulation",
            old.shape(),
            new.shape(),
        ));
    }
    for (a, b) in old.data_mut().iter_mut().zip(new.data()) {
        *a += b;
    }
    Ok(old)
}

/// Nodes reachable from `root`, each after all of its inputs (iterative depth-first).
fn topological_order(root: &Arc<Node>) -> Vec<Arc<Node>> {
    let mut order = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<(Arc<Node>, usize)> = vec![(root.clone(), 0)];
    seen.insert(key(root));
    while let Some((node, next)) = stack.pop() {
        let child = node.inputs[next..]
            .iter()
            .enumerate()
            .find_map(|(i, n)| n.as_ref().map(|n| (next + i, n.clone())));
        match child {
            Some((i, c)) => {
                stack.push((node, i + 1));
                if seen.insert(key(&c)) {
                    stack.push((c, 0));
                }
            }
            None => order.push(node),
        }
    }
    order
}

#[cfg(test)]
mod tests;
