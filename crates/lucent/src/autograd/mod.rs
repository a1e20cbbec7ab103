//! Reverse-mode automatic differentiation, as the library's users meet it: gradient
//! recording on and off ([`no_grad`], [`with_grad`]), data-parallel backward passes
//! ([`backward_sharded`]). The optimisers and the parameter visitor that use the
//! gradients are training's ([`crate::train`]).
//!
//! The machinery is with the tensor ([`crate::tensor::tape`]: the graph's [`Node`]s,
//! `Tensor::requires_grad`, `Tensor::backward`), and each op's backward rule sits beside
//! its forward (the tensor's own ops in `tensor/backward.rs`, the kernels' in their
//! `ops` files).

pub use crate::tensor::tape::{backward_sharded, is_grad_enabled, no_grad, with_grad, Node};

#[cfg(test)]
mod tests;
