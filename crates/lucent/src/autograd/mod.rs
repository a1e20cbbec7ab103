//! Reverse-mode automatic differentiation, as the library's users meet it: gradient
//! recording on and off ([`no_grad`], [`with_grad`]), data-parallel backward passes
//! ([`backward_sharded`]), the optimisers ([`optim`]) and the parameter visitor
//! ([`params`]).
//!
//! The machinery is with the tensor ([`crate::tensor::tape`]: the graph's [`Node`]s,
//! `Tensor::requires_grad`, `Tensor::backward`), and each op's backward rule sits beside
//! its forward (the tensor's own ops in `tensor/backward.rs`, the kernels' in their
//! `ops` files).

pub mod optim;
pub mod params;

pub use crate::tensor::tape::{backward_sharded, is_grad_enabled, no_grad, with_grad, Node};
pub use params::{Parameters, ParamsMut};

#[cfg(test)]
mod tests;
