//! Training from scratch: models, data, the training loop, checkpoints.

pub mod data;
pub mod models;
