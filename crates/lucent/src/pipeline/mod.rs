//! User tasks built on the model layer: training small Transformers from scratch.

pub mod train;
